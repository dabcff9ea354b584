// Reading and writing the safetensors format (https://github.com/huggingface/safetensors):
// an 8-byte little-endian header length, a JSON header {name: {dtype, shape, data_offsets}},
// an optional "__metadata__" string map, then the raw little-endian tensor bytes.
//
// Torch-free: tensors are byte spans plus dtype and shape; the worker wraps them in torch
// tensors. `SafetensorsFile` maps the file read-only; views stay valid while it lives.
// Thread-compatible (read-only after Open).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace adctl {

enum class DType { kF64, kF32, kF16, kBF16, kI64, kI32, kI16, kI8, kU8, kBool };

const char* DTypeName(DType dtype);  // "F32", as in the safetensors header
size_t DTypeSize(DType dtype);

struct TensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;  // into the mapping
  size_t nbytes = 0;
};

class SafetensorsFile {
 public:
  // Maps and parses `path`. Errors name the file and what is wrong (truncated header, offsets
  // outside the file, unknown dtype, size not matching the shape).
  static Result<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  // In file order (by data offset).
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* Find(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  SafetensorsFile() = default;
  std::string path_;
  void* mapping_ = nullptr;
  size_t mapping_size_ = 0;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

// One tensor to write; `data` must hold nbytes = product(shape) × DTypeSize(dtype).
struct TensorToWrite {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const void* data = nullptr;
  size_t nbytes = 0;
};

// Writes the tensors (sorted by name, as the reference writer does) and fsyncs the file.
Status WriteSafetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                        const std::map<std::string, std::string>& metadata = {});

}  // namespace adctl

#include "common/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>

#include "common/json_errors.h"

namespace adctl {
namespace {

struct DTypeEntry {
  DType dtype;
  const char* name;
  size_t size;
};

constexpr DTypeEntry kDTypes[] = {
    {DType::kF64, "F64", 8},   {DType::kF32, "F32", 4}, {DType::kF16, "F16", 2},
    {DType::kBF16, "BF16", 2}, {DType::kI64, "I64", 8}, {DType::kI32, "I32", 4},
    {DType::kI16, "I16", 2},   {DType::kI8, "I8", 1},   {DType::kU8, "U8", 1},
    {DType::kBool, "BOOL", 1},
};

bool ParseDType(const std::string& name, DType* out) {
  for (const auto& e : kDTypes) {
    if (name == e.name) {
      *out = e.dtype;
      return true;
    }
  }
  return false;
}

// Largest header the reference implementation accepts (100 MB).
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

}  // namespace

const char* DTypeName(DType dtype) {
  for (const auto& e : kDTypes) {
    if (e.dtype == dtype) return e.name;
  }
  return "?";
}

size_t DTypeSize(DType dtype) {
  for (const auto& e : kDTypes) {
    if (e.dtype == dtype) return e.size;
  }
  return 0;
}

SafetensorsFile::~SafetensorsFile() {
  if (mapping_ != nullptr) munmap(mapping_, mapping_size_);
}

Result<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return NotFound(path + ": cannot open: " + std::strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    ::close(fd);
    return Internal(path + ": fstat failed");
  }
  auto file = std::unique_ptr<SafetensorsFile>(new SafetensorsFile());
  file->path_ = path;
  const size_t size = static_cast<size_t>(st.st_size);
  if (size < 8) {
    ::close(fd);
    return DataLoss(path + ": not a safetensors file (" + std::to_string(size) + " bytes)");
  }
  void* mapping = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (mapping == MAP_FAILED) return Internal(path + ": mmap failed: " + std::strerror(errno));
  file->mapping_ = mapping;
  file->mapping_size_ = size;

  const auto* bytes = static_cast<const uint8_t*>(mapping);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | bytes[i];
  if (header_len > kMaxHeaderBytes || 8 + header_len > size) {
    // The length is the file's first 8 bytes: not quoted (the file may be anything).
    return DataLoss(path + ": not a safetensors file: its header length does not fit its " +
                    std::to_string(size) + " bytes (truncated, corrupt or another kind of file)");
  }
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(bytes + 8, bytes + 8 + header_len);
  } catch (const std::exception& e) {
    return DataLoss(path + ": header is " + JsonErrorWithoutContent(e));
  }
  if (!header.is_object()) return DataLoss(path + ": header is not a JSON object");
  const uint8_t* data_start = bytes + 8 + header_len;
  const size_t data_size = size - 8 - header_len;

  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it->is_object()) return DataLoss(path + ": __metadata__ is not an object");
      for (auto m = it->begin(); m != it->end(); ++m) {
        if (m->is_string()) file->metadata_[m.key()] = m->get<std::string>();
      }
      continue;
    }
    const std::string where = path + ": tensor '" + it.key() + "'";
    const auto& entry = *it;
    if (!entry.is_object() || !entry.contains("dtype") || !entry.contains("shape") ||
        !entry.contains("data_offsets")) {
      return DataLoss(where + ": needs dtype, shape and data_offsets");
    }
    TensorInfo info;
    info.name = it.key();
    if (!entry["dtype"].is_string() ||
        !ParseDType(entry["dtype"].get<std::string>(), &info.dtype)) {
      return DataLoss(where + ": unknown dtype (expected F32, F16, BF16, ...)");
    }
    size_t numel = 1;
    for (const auto& d : entry["shape"]) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0) {
        return DataLoss(where + ": bad shape (expected non-negative integers)");
      }
      info.shape.push_back(d.get<int64_t>());
      numel *= static_cast<size_t>(d.get<int64_t>());
    }
    const auto& offsets = entry["data_offsets"];
    if (!offsets.is_array() || offsets.size() != 2) return DataLoss(where + ": bad data_offsets");
    const uint64_t begin = offsets[0].get<uint64_t>();
    const uint64_t end = offsets[1].get<uint64_t>();
    if (begin > end || end > data_size) {
      return DataLoss(where + ": data_offsets [" + std::to_string(begin) + ", " +
                      std::to_string(end) + "] outside the " + std::to_string(data_size) +
                      " data bytes (truncated file?)");
    }
    info.nbytes = end - begin;
    if (info.nbytes != numel * DTypeSize(info.dtype)) {
      return DataLoss(where + ": " + std::to_string(info.nbytes) + " bytes do not match its " +
                      std::to_string(info.shape.size()) + "-d shape of " + DTypeName(info.dtype));
    }
    info.data = data_start + begin;
    file->tensors_.push_back(std::move(info));
  }
  std::sort(file->tensors_.begin(), file->tensors_.end(),
            [](const TensorInfo& a, const TensorInfo& b) { return a.data < b.data; });
  for (size_t i = 0; i < file->tensors_.size(); ++i) file->index_[file->tensors_[i].name] = i;
  return file;
}

const TensorInfo* SafetensorsFile::Find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

Status WriteSafetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                        const std::map<std::string, std::string>& metadata) {
  std::vector<const TensorToWrite*> sorted;
  for (const auto& t : tensors) sorted.push_back(&t);
  std::sort(sorted.begin(), sorted.end(),
            [](const TensorToWrite* a, const TensorToWrite* b) { return a->name < b->name; });
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const auto* t : sorted) {
    size_t numel = 1;
    for (int64_t d : t->shape) numel *= static_cast<size_t>(d);
    if (numel * DTypeSize(t->dtype) != t->nbytes) {
      return InvalidArgument(path + ": tensor '" + t->name + "' has " + std::to_string(t->nbytes) +
                             " bytes, shape needs " + std::to_string(numel * DTypeSize(t->dtype)));
    }
    header[t->name] = {{"dtype", DTypeName(t->dtype)},
                       {"shape", t->shape},
                       {"data_offsets", {offset, offset + t->nbytes}}};
    offset += t->nbytes;
  }
  std::string header_text = header.dump();
  // Pad the header with spaces to an 8-byte boundary, as the reference writer does.
  while ((header_text.size() % 8) != 0) header_text.push_back(' ');

  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Internal(path + ": cannot create: " + std::strerror(errno));
  auto write_all = [fd](const void* p, size_t n) {
    const auto* c = static_cast<const char*>(p);
    while (n > 0) {
      ssize_t w = ::write(fd, c, n);
      if (w < 0) {
        if (errno == EINTR) continue;
        return false;
      }
      c += w;
      n -= static_cast<size_t>(w);
    }
    return true;
  };
  uint8_t len_bytes[8];
  uint64_t len = header_text.size();
  for (int i = 0; i < 8; ++i) len_bytes[i] = static_cast<uint8_t>(len >> (8 * i));
  bool ok = write_all(len_bytes, 8) && write_all(header_text.data(), header_text.size());
  for (const auto* t : sorted) ok = ok && write_all(t->data, t->nbytes);
  ok = ok && ::fsync(fd) == 0;
  const int saved_errno = errno;
  ::close(fd);
  if (!ok) return Internal(path + ": write failed: " + std::strerror(saved_errno));
  return Status::Ok();
}

}  // namespace adctl

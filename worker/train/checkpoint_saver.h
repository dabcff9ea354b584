// Checkpoints that do not stop training.
//
// Start() copies the training state (the motion modules or a LoRA's adapters, and the optimizer
// state) into host
// buffers — pinned when the state lives on a GPU, allocated once and reused by every later
// checkpoint — waiting for the device once, and returns; a background thread then writes the
// files, hashes and fsyncs them and commits the directory (common/checkpoint_dir.h: the commit
// is the rename of a finished temporary directory), applies retention and measures the result.
// Training goes on meanwhile: the stall is the copy, not the write.
//
// At most one write is in flight: Start() first waits for the previous one, whose result the
// caller collects with Wait() or Poll() before starting the next (Start() keeps it otherwise,
// and the next Wait()/Poll() returns it first). A process killed during a write leaves the
// previous committed checkpoint the newest one, and a `.tmp-step-*` directory that retention
// removes once the writer's pid is gone.
//
// Used by one thread (the training loop); the background thread touches only the saver's own
// buffers and the checkpoint root.
#pragma once

#include <torch/torch.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>

#include "common/checkpoint_dir.h"
#include "common/status.h"
#include "worker/model/weights.h"

namespace adctl {

// What one checkpoint holds. The tensors may live on any device; Start() copies them.
struct CheckpointState {
  int64_t step = 0;
  TensorMap motion_adapter;           // written as motion_adapter/ (a MotionAdapter folder, fp32)
  std::string motion_adapter_config;  // its config.json (a LoRA's: its base's, in lora/)
  // A LoRA job's adapters instead (common/checkpoint_export.h): written as lora/ + kLoraFileName in
  // diffusers' layout, alpha not folded, with `lora_metadata` as the file's metadata.
  TensorMap lora;
  std::map<std::string, std::string> lora_metadata;
  TensorMap optimizer;  // written as optimizer.safetensors
  // train.ema's averages, under the names of `motion_adapter` or `lora`: written as ema/, a
  // folder with the same layout (worker/train/ema.h).
  TensorMap ema_motion_adapter;
  TensorMap ema_lora;
  nlohmann::json metadata = nlohmann::json::object();  // the manifest's metadata
};

// Writes the files of `state` into folder `dir` (motion_adapter/ or lora/, optimizer.safetensors
// when it has optimizer state, ema/ when it has averages): a checkpoint's, or an export's source.
Status WriteCheckpointFiles(const std::string& dir, const CheckpointState& state);

// How a write ended.
struct SavedCheckpoint {
  int64_t step = 0;
  Status status;                // not ok: nothing was committed (the message names what failed)
  std::string path;             // the committed directory
  int64_t size_bytes = 0;       // of the committed directory
  double copy_seconds = 0;      // Start(): copying the state to host memory (training waited)
  double write_seconds = 0;     // background: tensors to files
  double commit_seconds = 0;    // background: sha256 + fsync + rename
  std::string retention_error;  // retention failed (the checkpoint itself is committed)
};

class CheckpointSaver {
 public:
  // Checkpoints go to `root`; after each commit retention applies `retention`
  // (common/checkpoint_dir.h) with the steps pinned in `pins_file` ("" for none) read then,
  // so a pin made while the job runs is honoured at the next commit.
  CheckpointSaver(std::string root, RetentionPolicy retention, std::string pins_file = "");
  // Waits for a write in flight (its result is dropped).
  ~CheckpointSaver();
  CheckpointSaver(const CheckpointSaver&) = delete;
  CheckpointSaver& operator=(const CheckpointSaver&) = delete;

  // Allocates the host buffers for states shaped like `like` in the background, so that the
  // first Start() does not pay for pinning gigabytes of memory. Optional; before any Start().
  void Reserve(const CheckpointState& like);
  // Waits for the write in flight, if any, copies `state` into the host buffers and starts
  // writing it in the background.
  void Start(const CheckpointState& state);
  // The result of a finished write not yet collected, without waiting; nullopt when there is
  // none (nothing started, or the write still runs).
  std::optional<SavedCheckpoint> Poll();
  // The bytes of tensors the last Start() handed to the writer (what a checkpoint needs on disk,
  // about): for saying whether a failed write ran out of space.
  int64_t last_state_bytes() const;
  // Waits for the write in flight and returns the oldest result not yet collected; nullopt
  // when there is none.
  std::optional<SavedCheckpoint> Wait();
  bool in_flight() const { return thread_.joinable() && !finished_.load(); }

 private:
  // The host buffer for `live` under `key`, (re)allocated when missing or of another shape.
  torch::Tensor& Buffer(const std::string& key, const torch::Tensor& live);
  // Host copies of `live`, in buffers kept by name across checkpoints.
  TensorMap CopyToHost(const TensorMap& live, const std::string& prefix);
  SavedCheckpoint Write(const CheckpointState& host);
  void Join();

  std::string root_;
  std::string resolved_root_;  // root_ with its symlinks resolved when the saver was made
  RetentionPolicy retention_;
  std::string pins_file_;
  std::map<std::string, torch::Tensor> buffers_;  // "<prefix><name>" -> host buffer
  std::thread thread_;
  std::atomic<bool> finished_{false};
  CheckpointState host_state_;  // what the thread writes (views of buffers_)
  std::mutex mu_;
  std::deque<SavedCheckpoint> results_;  // finished, not collected (guarded by mu_)
};

}  // namespace adctl

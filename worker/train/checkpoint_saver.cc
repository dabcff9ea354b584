#include "worker/train/checkpoint_saver.h"

#include <torch/cuda.h>

#include <chrono>
#include <filesystem>
#include <utility>

#include "common/checkpoint_dir.h"
#include "common/checkpoint_export.h"
#include "common/fs_util.h"
#include "worker/train/ema.h"

namespace adctl {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// `path` with every symlink resolved (as far as it exists); "" when it cannot be resolved.
std::string ResolvedPath(const std::string& path) {
  std::error_code ec;
  const std::filesystem::path resolved = std::filesystem::weakly_canonical(path, ec);
  return ec ? std::string() : resolved.string();
}

}  // namespace

Status WriteCheckpointFiles(const std::string& dir, const CheckpointState& state) {
  if (!state.motion_adapter.empty()) {
    ADCTL_RETURN_IF_ERROR(WriteModelFolder(dir + "/motion_adapter", state.motion_adapter,
                                           state.motion_adapter_config));
  }
  if (!state.lora.empty()) {
    const std::string lora = dir + "/" + kLoraCheckpointDir;
    std::error_code ec;
    std::filesystem::create_directories(lora, ec);
    if (ec) return Internal(lora + ": " + ec.message());
    ADCTL_RETURN_IF_ERROR(
        WriteTensorFile(lora + "/" + kLoraFileName, state.lora, state.lora_metadata));
    ADCTL_RETURN_IF_ERROR(
        WriteFileText(lora + "/" + kLoraBaseConfigName, state.motion_adapter_config));
  }
  if (!state.optimizer.empty()) {
    ADCTL_RETURN_IF_ERROR(WriteTensorFile(dir + "/optimizer.safetensors", state.optimizer));
  }
  if (!state.ema_motion_adapter.empty() || !state.ema_lora.empty()) {
    CheckpointState ema;
    ema.motion_adapter = state.ema_motion_adapter;
    ema.motion_adapter_config = state.motion_adapter_config;
    ema.lora = state.ema_lora;
    ema.lora_metadata = state.lora_metadata;
    ADCTL_RETURN_IF_ERROR(WriteCheckpointFiles(dir + "/" + kEmaCheckpointDir, ema));
  }
  return Status::Ok();
}

CheckpointSaver::CheckpointSaver(std::string root, RetentionPolicy retention, std::string pins_file)
    : root_(std::move(root)),
      resolved_root_(ResolvedPath(root_)),
      retention_(std::move(retention)),
      pins_file_(std::move(pins_file)) {}

CheckpointSaver::~CheckpointSaver() { Join(); }

void CheckpointSaver::Join() {
  if (thread_.joinable()) thread_.join();
}

torch::Tensor& CheckpointSaver::Buffer(const std::string& key, const torch::Tensor& live) {
  torch::Tensor& buffer = buffers_[key];
  if (!buffer.defined() || buffer.sizes() != live.sizes() ||
      buffer.scalar_type() != live.scalar_type()) {
    // Pinned memory makes the copy from the GPU an asynchronous DMA at full bus speed.
    buffer = torch::empty(
        live.sizes(),
        torch::TensorOptions().dtype(live.scalar_type()).pinned_memory(live.is_cuda()));
  }
  return buffer;
}

TensorMap CheckpointSaver::CopyToHost(const TensorMap& live, const std::string& prefix) {
  TensorMap host;
  for (const auto& [name, t] : live) {
    torch::Tensor& buffer = Buffer(prefix + name, t);
    buffer.copy_(t.detach(), /*non_blocking=*/t.is_cuda());
    host[name] = buffer;
  }
  return host;
}

int64_t CheckpointSaver::last_state_bytes() const {
  int64_t bytes = 0;
  for (const auto* map : {&host_state_.motion_adapter, &host_state_.lora, &host_state_.optimizer,
                          &host_state_.ema_motion_adapter, &host_state_.ema_lora}) {
    for (const auto& item : *map) bytes += static_cast<int64_t>(item.second.nbytes());
  }
  return bytes;
}

void CheckpointSaver::Reserve(const CheckpointState& like) {
  Join();
  finished_ = false;
  thread_ = std::thread([this, adapter = like.motion_adapter, lora = like.lora,
                         optimizer = like.optimizer, ema_adapter = like.ema_motion_adapter,
                         ema_lora = like.ema_lora] {
    for (const auto& [name, t] : adapter) Buffer("motion_adapter/" + name, t);
    for (const auto& [name, t] : lora) Buffer("lora/" + name, t);
    for (const auto& [name, t] : optimizer) Buffer("optimizer/" + name, t);
    for (const auto& [name, t] : ema_adapter) Buffer("ema/motion_adapter/" + name, t);
    for (const auto& [name, t] : ema_lora) Buffer("ema/lora/" + name, t);
    finished_ = true;
  });
}

void CheckpointSaver::Start(const CheckpointState& state) {
  Join();  // at most one write in flight; its result stays in results_
  const auto t0 = Clock::now();
  host_state_.step = state.step;
  host_state_.motion_adapter_config = state.motion_adapter_config;
  host_state_.metadata = state.metadata;
  host_state_.lora_metadata = state.lora_metadata;
  host_state_.motion_adapter = CopyToHost(state.motion_adapter, "motion_adapter/");
  host_state_.lora = CopyToHost(state.lora, "lora/");
  host_state_.optimizer = CopyToHost(state.optimizer, "optimizer/");
  host_state_.ema_motion_adapter = CopyToHost(state.ema_motion_adapter, "ema/motion_adapter/");
  host_state_.ema_lora = CopyToHost(state.ema_lora, "ema/lora/");
  bool on_gpu = false;
  for (const auto* map : {&state.motion_adapter, &state.lora, &state.optimizer,
                          &state.ema_motion_adapter, &state.ema_lora}) {
    for (const auto& item : *map) on_gpu = on_gpu || item.second.is_cuda();
  }
  if (on_gpu) torch::cuda::synchronize();  // the copies above were queued, not finished
  const double copy_seconds = Seconds(t0, Clock::now());
  finished_ = false;
  thread_ = std::thread([this, copy_seconds] {
    SavedCheckpoint saved = Write(host_state_);
    saved.copy_seconds = copy_seconds;
    {
      std::lock_guard<std::mutex> lock(mu_);
      results_.push_back(std::move(saved));
    }
    finished_ = true;
  });
}

SavedCheckpoint CheckpointSaver::Write(const CheckpointState& host) {
  SavedCheckpoint saved;
  saved.step = host.step;
  const auto t0 = Clock::now();
  // The root is resolved again before each write: a folder of its path swapped for a symlink
  // since the run started (into another job's checkpoints, out of adctld's --write-root) is
  // refused, not followed.
  if (const std::string now = ResolvedPath(root_); now != resolved_root_) {
    saved.status = FailedPrecondition("checkpoint folder " + root_ + " resolved to " +
                                      resolved_root_ + " when the run started and to " + now +
                                      " now (a symlink in its path?): nothing written");
    return saved;
  }
  auto writer = CheckpointWriter::Begin(root_, host.step);
  if (!writer.ok()) {
    saved.status = writer.status();
    return saved;
  }
  Status st = WriteCheckpointFiles(writer->dir(), host);
  if (!st.ok()) {
    saved.status = st;
    return saved;  // the writer's destructor removes the temporary directory
  }
  const auto t1 = Clock::now();
  auto path = writer->Commit(host.metadata);
  if (!path.ok()) {
    saved.status = path.status();
    return saved;
  }
  saved.path = *path;
  saved.write_seconds = Seconds(t0, t1);
  saved.commit_seconds = Seconds(t1, Clock::now());
  // Pins come and go while the job runs: read them at each retention. Unreadable pins delete
  // nothing (a pinned checkpoint must never go).
  auto pins = pins_file_.empty() ? Result<std::set<int64_t>>(std::set<int64_t>())
                                 : ReadCheckpointPins(pins_file_);
  if (pins.ok()) {
    retention_.pinned = std::move(pins).value();
    auto retention = ApplyRetention(root_, retention_);
    if (!retention.ok()) saved.retention_error = retention.status().ToString();
  } else {
    saved.retention_error = pins.status().ToString() + "; no checkpoint was deleted";
  }
  // The size from the listing (stat only): verifying would hash every file a second time.
  auto listed = ListCheckpoints(root_);
  if (listed.ok()) {
    for (const CheckpointInfo& info : *listed) {
      if (info.step == host.step) saved.size_bytes = info.bytes;
    }
  }
  return saved;
}

std::optional<SavedCheckpoint> CheckpointSaver::Poll() {
  if (finished_.load()) Join();
  std::lock_guard<std::mutex> lock(mu_);
  if (results_.empty()) return std::nullopt;
  SavedCheckpoint saved = std::move(results_.front());
  results_.pop_front();
  return saved;
}

std::optional<SavedCheckpoint> CheckpointSaver::Wait() {
  Join();
  return Poll();
}

}  // namespace adctl

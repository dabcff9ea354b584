// MakeFanOutReporter and MakeLogReporter (declared in reporter.h).
#include "worker/report/reporter.h"

#include <spdlog/spdlog.h>

#include <cstdio>
#include <memory>
#include <vector>

namespace adctl {

std::string DescribeSamples(const SamplesReport& r) {
  size_t prompts = 0;
  for (const SampleFile& f : r.files) prompts += f.index >= 0 ? 1 : 0;
  char line[160];
  std::snprintf(line, sizeof(line), "validation step %lld: %zu samples in %.2f s → ",
                static_cast<long long>(r.step), prompts, r.seconds);
  return line + r.dir;
}

namespace {

class FanOutReporter : public Reporter {
 public:
  explicit FanOutReporter(std::vector<std::unique_ptr<Reporter>> sinks)
      : sinks_(std::move(sinks)) {}
  void OnTrainingStarted(int64_t resumed_from_step, int64_t total_steps) override {
    for (auto& s : sinks_) s->OnTrainingStarted(resumed_from_step, total_steps);
  }
  void OnStep(const StepReport& report) override {
    for (auto& s : sinks_) s->OnStep(report);
  }
  void OnCheckpoint(const CheckpointReport& report) override {
    for (auto& s : sinks_) s->OnCheckpoint(report);
  }
  void OnEvent(EventLevel level, const std::string& message) override {
    for (auto& s : sinks_) s->OnEvent(level, message);
  }
  void OnSamples(const SamplesReport& report) override {
    for (auto& s : sinks_) s->OnSamples(report);
  }
  bool StopRequested() override {
    bool stop = false;
    for (auto& s : sinks_) stop = s->StopRequested() || stop;
    return stop;
  }

 private:
  // Constant after construction; each sink is thread-safe itself.
  std::vector<std::unique_ptr<Reporter>> sinks_;
};

class LogReporter : public Reporter {
 public:
  explicit LogReporter(int rank) : rank_(rank) {}
  void OnTrainingStarted(int64_t resumed_from_step, int64_t total_steps) override {
    if (resumed_from_step > 0) {
      spdlog::info("rank {}: training resumed from step {} of {}", rank_, resumed_from_step,
                   total_steps);
    } else {
      spdlog::info("rank {}: training started, {} steps", rank_, total_steps);
    }
  }
  void OnStep(const StepReport& r) override {
    spdlog::info(
        "rank {}: step {}/{} loss {:.6f} lr {:.3g} grad_norm {:.4f} {:.3f} s/step "
        "{:.2f} clips/s data_wait {:.3f} s allreduce {:.3f} s",
        rank_, r.step, r.total_steps, r.loss, r.learning_rate, r.grad_norm, r.step_seconds,
        r.clips_per_second, r.data_wait_seconds, r.allreduce_exposed_seconds);
    if (r.mfu_ratio > 0)
      spdlog::info("rank {}: step {} MFU {:.1f} %", rank_, r.step, 100 * r.mfu_ratio);
  }
  void OnCheckpoint(const CheckpointReport& r) override {
    spdlog::info(
        "rank {}: checkpoint step {} committed: {} ({} bytes, written in {:.2f} s, training "
        "paused {:.2f} s)",
        rank_, r.step, r.path, r.size_bytes, r.save_seconds, r.stall_seconds);
  }
  void OnEvent(EventLevel level, const std::string& message) override {
    switch (level) {
      case EventLevel::kInfo:
        spdlog::info("rank {}: {}", rank_, message);
        break;
      case EventLevel::kWarning:
        spdlog::warn("rank {}: {}", rank_, message);
        break;
      case EventLevel::kError:
        spdlog::error("rank {}: {}", rank_, message);
        break;
    }
  }
  bool StopRequested() override { return false; }

 private:
  const int rank_;
};

}  // namespace

std::unique_ptr<Reporter> MakeFanOutReporter(std::vector<std::unique_ptr<Reporter>> sinks) {
  return std::make_unique<FanOutReporter>(std::move(sinks));
}

std::unique_ptr<Reporter> MakeLogReporter(int rank) { return std::make_unique<LogReporter>(rank); }

}  // namespace adctl

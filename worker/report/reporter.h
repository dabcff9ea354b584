// What a training rank tells the outside world while it runs.
//
// The training loop calls a Reporter; `LogReporter` (always) writes to the rank's log, and the
// coordinator client (worker/report/coordinator_client.h) streams the same records to adctld
// over adctl.v1.WorkerService. Torch-free on purpose. Implementations must be thread-safe: the
// training thread and a heartbeat thread may call them concurrently.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/metric_values.h"
#include "common/record_values.h"

namespace adctl {

// One optimizer step as seen by one rank: the values every metric point carries
// (common/metric_values.h lists them once).
using StepReport = MetricValues;

// A committed checkpoint (common/record_values.h lists its values once).
using CheckpointReport = CheckpointValues;

// The validation samples of one step (worker/sample/validation.h renders them), each file pair
// with its values (common/record_values.h).
using SampleFile = SampleValues;
struct SamplesReport {
  int64_t step = 0;
  double seconds = 0;  // sampling, decoding and writing the files of every prompt
  std::string dir;     // absolute
  std::vector<SampleFile> files;
};
// "validation step 2: 2 samples in 1.23 s → <dir>" (the grid is not counted).
std::string DescribeSamples(const SamplesReport& report);

enum class EventLevel { kInfo, kWarning, kError };

class Reporter {
 public:
  virtual ~Reporter() = default;
  // After model load and rendezvous, before the first step; `resumed_from_step` is 0 on a fresh
  // start.
  virtual void OnTrainingStarted(int64_t resumed_from_step, int64_t total_steps) = 0;
  virtual void OnStep(const StepReport& report) = 0;
  virtual void OnCheckpoint(const CheckpointReport& report) = 0;
  virtual void OnEvent(EventLevel level, const std::string& message) = 0;
  // Validation samples were written; by default an info event describing them.
  virtual void OnSamples(const SamplesReport& report) {
    OnEvent(EventLevel::kInfo, DescribeSamples(report));
  }
  // True once the coordinator asked this rank to stop (pause/cancel); the loop then
  // checkpoints and exits with kExitStopped. SIGTERM sets the same flag locally.
  virtual bool StopRequested() = 0;
};

// Sends every record to each of `sinks` (e.g. the log and the coordinator).
std::unique_ptr<Reporter> MakeFanOutReporter(std::vector<std::unique_ptr<Reporter>> sinks);
// Writes records to spdlog; StopRequested() is false (signals are handled by the loop).
std::unique_ptr<Reporter> MakeLogReporter(int rank);

}  // namespace adctl

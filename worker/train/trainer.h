// One training rank: model, data, optimizer, data-parallel reduction, checkpoints, stop.
//
// `RunTrainer` is what `adworker train` does after parsing its command line. Every failure
// maps to a documented exit code (common/worker_contract.h). A rank always resumes from the newest
// verified checkpoint under the checkpoint directory, so restart and resume need nothing from
// the caller. Per-sample noise and timesteps are drawn from generators seeded by
// (train.seed, the sample's run-wide position), so the RNG state is the data position, N ranks
// draw exactly what one rank with N× the batch draws, and a resumed run continues the same
// loss curve. Not thread-safe; one per process.
#pragma once

#include <atomic>
#include <string>

#include "common/job_spec.h"
#include "worker/dist/kv_store.h"
#include "worker/report/reporter.h"

namespace adctl {

struct TrainerOptions {
  JobSpec spec;
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 0;  // ranks on this host; 0: world_size
  int attempt = 1;
  std::string job_dir;
  // Rendezvous store for world_size > 1 (the coordinator's, or a directory store).
  KeyValueStore* store = nullptr;
  Reporter* reporter = nullptr;
  // Set by SIGTERM: finish the step, checkpoint, exit kExitStopped.
  const std::atomic<bool>* stop_flag = nullptr;
  // Set once the loop watches stop_flag (training's or preprocessing's first step): before
  // then a SIGTERM ends the rank at once (adworker's handler), so a rank still loading or
  // waiting at the rendezvous does not hold its devices for the whole grace period.
  std::atomic<bool>* stop_watched = nullptr;
};

// Runs the job; returns the process exit code.
int RunTrainer(const TrainerOptions& options);

}  // namespace adctl

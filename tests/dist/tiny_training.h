// A small model trained a few steps, alone or data-parallel through GradientReducer: the fixture
// for "N ranks with batch b equal 1 rank with batch N*b" (STYLE.md, rule 9). Used by the CPU
// (Gloo) and the GPU (NCCL) tests. Deterministic: the data and the initial weights come from
// fixed seeds; rank r > 0 starts from other weights, which BroadcastParameters must replace.
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

#include "worker/dist/communicator.h"
#include "worker/dist/gradient_reducer.h"

namespace adctl::test {

struct TinyTrainingConfig {
  int steps = 4;
  int64_t batch_per_rank = 4;
  int accumulation = 1;           // micro-steps per optimizer step
  std::string optimizer = "sgd";  // "sgd" | "adamw"
  double lr = 0.05;
  ReducerOptions reducer;
  std::string device = "cpu";

  // As NAME=value entries for rank processes, and back.
  std::vector<std::string> ToEnv() const;
  static TinyTrainingConfig FromEnv();
};

struct TinyTrainingResult {
  std::vector<double> losses;         // per optimizer step, mean over ranks
  std::vector<torch::Tensor> params;  // after the last step, on CPU
  std::vector<int64_t> bucket_sizes_bytes;
  int64_t buckets_launched_during_backward = 0;  // in the last step
  double exposed_allreduce_seconds = 0;          // in the last step

  void Save(const std::string& path) const;
  static TinyTrainingResult Load(const std::string& path);
};

// comm == nullptr: one rank without any reducer (the reference).
TinyTrainingResult TrainTinyModel(Communicator* comm, const TinyTrainingConfig& config);

// Largest |a - b| over the parameters (infinity when the shapes differ).
double MaxParameterDifference(const std::vector<torch::Tensor>& a,
                              const std::vector<torch::Tensor>& b);
// ||(a - initial) - (reference - initial)|| / ||reference - initial|| over all parameters: how
// far training moved `a` off the reference's path, relative to how far it moved at all.
double RelativeUpdateDifference(const std::vector<torch::Tensor>& a,
                                const std::vector<torch::Tensor>& reference,
                                const std::vector<torch::Tensor>& initial);

}  // namespace adctl::test

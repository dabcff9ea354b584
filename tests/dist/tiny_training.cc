#include "tests/dist/tiny_training.h"

#include <cmath>
#include <cstdlib>
#include <limits>

#include "tests/dist/multiprocess.h"
#include "worker/data/sampler.h"

namespace adctl::test {
namespace {

constexpr int64_t kDatasetSize = 96;

// Registered in an order unlike the forward order (the head first), so the gradients arrive in
// an order that the bucket rebuild has to learn.
struct TinyNetImpl : torch::nn::Module {
  TinyNetImpl() {
    head = register_module("head", torch::nn::Linear(32, 4));
    first = register_module("first", torch::nn::Linear(8, 32));
    norm = register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({32})));
    second = register_module("second", torch::nn::Linear(32, 32));
  }
  torch::Tensor forward(torch::Tensor x) {
    x = torch::tanh(first(x));
    x = torch::tanh(norm(second(x)));
    return head(x);
  }
  torch::nn::Linear head{nullptr}, first{nullptr}, second{nullptr};
  torch::nn::LayerNorm norm{nullptr};
};
TORCH_MODULE(TinyNet);

}  // namespace

std::vector<std::string> TinyTrainingConfig::ToEnv() const {
  return {"TINY_STEPS=" + std::to_string(steps),
          "TINY_BATCH=" + std::to_string(batch_per_rank),
          "TINY_ACCUMULATION=" + std::to_string(accumulation),
          "TINY_OPTIMIZER=" + optimizer,
          "TINY_LR=" + std::to_string(lr),
          "TINY_BUCKET_CAP_MB=" + std::to_string(reducer.bucket_cap_mb),
          "TINY_FIRST_BUCKET_MB=" + std::to_string(reducer.first_bucket_mb),
          "TINY_BF16=" + std::to_string(reducer.bf16_buckets ? 1 : 0),
          "TINY_REBUILD=" + std::to_string(reducer.rebuild_buckets ? 1 : 0),
          "TINY_DEVICE=" + device};
}

TinyTrainingConfig TinyTrainingConfig::FromEnv() {
  TinyTrainingConfig c;
  c.steps = std::stoi(GetEnv("TINY_STEPS", std::to_string(c.steps)));
  c.batch_per_rank = std::stoll(GetEnv("TINY_BATCH", std::to_string(c.batch_per_rank)));
  c.accumulation = std::stoi(GetEnv("TINY_ACCUMULATION", std::to_string(c.accumulation)));
  c.optimizer = GetEnv("TINY_OPTIMIZER", c.optimizer);
  c.lr = std::stod(GetEnv("TINY_LR", std::to_string(c.lr)));
  c.reducer.bucket_cap_mb = std::stod(GetEnv("TINY_BUCKET_CAP_MB", "25"));
  c.reducer.first_bucket_mb = std::stod(GetEnv("TINY_FIRST_BUCKET_MB", "1"));
  c.reducer.bf16_buckets = GetEnv("TINY_BF16", "0") == "1";
  c.reducer.rebuild_buckets = GetEnv("TINY_REBUILD", "1") == "1";
  c.device = GetEnv("TINY_DEVICE", c.device);
  return c;
}

void TinyTrainingResult::Save(const std::string& path) const {
  std::vector<torch::Tensor> all = params;
  all.push_back(torch::tensor(losses, torch::kDouble));
  all.push_back(torch::tensor(bucket_sizes_bytes, torch::kLong));
  all.push_back(torch::tensor({buckets_launched_during_backward}, torch::kLong));
  all.push_back(torch::tensor({exposed_allreduce_seconds}, torch::kDouble));
  torch::save(all, path);
}

TinyTrainingResult TinyTrainingResult::Load(const std::string& path) {
  std::vector<torch::Tensor> all;
  torch::load(all, path);
  TinyTrainingResult r;
  const size_t n = all.size();
  r.exposed_allreduce_seconds = all[n - 1].item<double>();
  r.buckets_launched_during_backward = all[n - 2].item<int64_t>();
  auto sizes = all[n - 3].contiguous();
  r.bucket_sizes_bytes.assign(sizes.data_ptr<int64_t>(), sizes.data_ptr<int64_t>() + sizes.numel());
  auto losses = all[n - 4].contiguous();
  r.losses.assign(losses.data_ptr<double>(), losses.data_ptr<double>() + losses.numel());
  r.params.assign(all.begin(), all.begin() + static_cast<long>(n - 4));
  return r;
}

TinyTrainingResult TrainTinyModel(Communicator* comm, const TinyTrainingConfig& config) {
  const int rank = comm ? comm->rank() : 0;
  const int world_size = comm ? comm->world_size() : 1;
  const torch::Device device(config.device);

  torch::manual_seed(1234);
  const torch::Tensor inputs = torch::randn({kDatasetSize, 8}).to(device);
  const torch::Tensor targets = torch::randn({kDatasetSize, 4}).to(device);

  torch::manual_seed(100 + rank);
  TinyNet model;
  model->to(device);
  std::vector<torch::Tensor> params = model->parameters();

  std::unique_ptr<torch::optim::Optimizer> optimizer;
  if (config.optimizer == "adamw") {
    optimizer = std::make_unique<torch::optim::AdamW>(
        params, torch::optim::AdamWOptions(config.lr).weight_decay(0.01));
  } else {
    optimizer = std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(config.lr));
  }

  std::unique_ptr<GradientReducer> reducer;
  if (comm) {
    reducer = std::make_unique<GradientReducer>(comm, params, config.reducer);
    reducer->BroadcastParameters(0);
  }
  DistributedSampler sampler(kDatasetSize, rank, world_size, /*seed=*/99);

  TinyTrainingResult result;
  for (int step = 0; step < config.steps; ++step) {
    optimizer->zero_grad();
    double loss_sum = 0;
    for (int micro = 0; micro < config.accumulation; ++micro) {
      const torch::Tensor index =
          torch::tensor(sampler.Next(config.batch_per_rank), torch::kLong).to(device);
      const torch::Tensor prediction = model->forward(inputs.index_select(0, index));
      const torch::Tensor loss =
          torch::mse_loss(prediction, targets.index_select(0, index)) / config.accumulation;
      if (reducer) reducer->PrepareForBackward(/*sync=*/micro == config.accumulation - 1);
      loss.backward();
      loss_sum += loss.item<double>();
    }
    if (reducer) {
      reducer->FinishBackward();
      loss_sum = AllReduceMean(comm, loss_sum);
    }
    optimizer->step();
    result.losses.push_back(loss_sum);
  }
  for (const torch::Tensor& p : params) result.params.push_back(p.detach().cpu().clone());
  if (reducer) {
    result.bucket_sizes_bytes = reducer->bucket_sizes_bytes();
    result.buckets_launched_during_backward = reducer->last_buckets_launched_during_backward();
    result.exposed_allreduce_seconds = reducer->last_exposed_allreduce_seconds();
  }
  return result;
}

double MaxParameterDifference(const std::vector<torch::Tensor>& a,
                              const std::vector<torch::Tensor>& b) {
  if (a.size() != b.size()) return std::numeric_limits<double>::infinity();
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].sizes() != b[i].sizes()) return std::numeric_limits<double>::infinity();
    worst = std::max(worst, (a[i] - b[i]).abs().max().item<double>());
  }
  return worst;
}

double RelativeUpdateDifference(const std::vector<torch::Tensor>& a,
                                const std::vector<torch::Tensor>& reference,
                                const std::vector<torch::Tensor>& initial) {
  double off_path = 0;
  double moved = 0;
  for (size_t i = 0; i < reference.size(); ++i) {
    off_path += (a[i] - reference[i]).pow(2).sum().item<double>();
    moved += (reference[i] - initial[i]).pow(2).sum().item<double>();
  }
  return std::sqrt(off_path / moved);
}

}  // namespace adctl::test

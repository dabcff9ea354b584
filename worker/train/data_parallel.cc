#include "worker/train/data_parallel.h"

#include <chrono>

#include "common/job_layout.h"
#include "worker/dist/directory_kv_store.h"

namespace adctl {

std::optional<Failure> ConnectDataParallel(
    const TrainerOptions& options, torch::Device device,
    const std::vector<std::pair<std::string, torch::Tensor>>& params, DataParallel& out) {
  if (options.world_size <= 1) return std::nullopt;
  const JobSpec& spec = options.spec;
  KeyValueStore* store = options.store;
  if (store == nullptr) {
    out.own_store =
        MakeDirectoryKeyValueStore(JobLayout(options.job_dir).rendezvous(options.attempt));
    store = out.own_store.get();
  }
  const auto timeout = std::chrono::milliseconds(
      static_cast<int64_t>(spec.resources.rendezvous_timeout_seconds * 1000));
  auto comm = MakeCommunicator(device.is_cuda() ? "nccl" : "gloo", store, options.rank,
                               options.world_size, timeout);
  if (!comm.ok()) {
    // A build without the backend is a configuration error, not worth a retry.
    const int code =
        comm.status().code() == StatusCode::kInvalidArgument ? kExitBadSpec : kExitTransient;
    return Failure{code, "rendezvous: " + comm.status().ToString()};
  }
  out.comm = std::move(*comm);
  ReducerOptions ro;
  ro.bucket_cap_mb = spec.train.bucket_cap_mb;
  ro.bf16_buckets = spec.train.bucket_dtype == BucketDtype::kBf16;
  std::vector<torch::Tensor> tensors;
  for (const auto& [name, p] : params) tensors.push_back(p);
  out.reducer = std::make_unique<GradientReducer>(out.comm.get(), tensors, ro);
  out.reducer->BroadcastParameters(0);
  return std::nullopt;
}

bool AnyRank(Communicator& comm, bool local) {
  auto flag = torch::tensor({local ? 1.0f : 0.0f}, torch::TensorOptions().device(comm.device()));
  comm.AllReduceSumAsync(flag)->Wait();
  return flag.item<float>() > 0;
}

}  // namespace adctl

#include "worker/dist/gloo_communicator.h"

#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "worker/dist/rendezvous.h"

namespace adctl {
namespace {

// gloo::rendezvous::Store over our KeyValueStore; every key is prefixed, every wait bounded by
// the rendezvous deadline. Gloo expects exceptions on failure.
class KeyValueGlooStore final : public gloo::rendezvous::Store {
 public:
  KeyValueGlooStore(KeyValueStore* store, std::string prefix,
                    std::chrono::steady_clock::time_point deadline)
      : store_(store), prefix_(std::move(prefix)), deadline_(deadline) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    Status status = store_->Set(prefix_ + key, std::string(data.begin(), data.end()));
    if (!status.ok()) throw std::runtime_error(status.ToString());
  }

  std::vector<char> get(const std::string& key) override {
    auto cached = values_.find(key);
    if (cached == values_.end()) {
      Fetch(key, TimeLeft(deadline_));
      cached = values_.find(key);
    }
    return std::vector<char>(cached->second.begin(), cached->second.end());
  }

  void wait(const std::vector<std::string>& keys) override { wait(keys, TimeLeft(deadline_)); }

  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    for (const std::string& key : keys) {
      if (values_.count(key) == 0) Fetch(key, std::min(timeout, TimeLeft(deadline_)));
    }
  }

 private:
  void Fetch(const std::string& key, std::chrono::milliseconds timeout) {
    Result<std::string> value = store_->Get(prefix_ + key, timeout);
    if (!value.ok()) throw std::runtime_error(value.status().ToString());
    values_[key] = std::move(value).value();
  }

  KeyValueStore* const store_;
  const std::string prefix_;
  const std::chrono::steady_clock::time_point deadline_;
  std::map<std::string, std::string> values_;  // gloo calls from one thread only
};

// c = a + b elementwise; Gloo's reduce-function signature. Generic over the element types we
// support (c10::BFloat16 and c10::Half add through float).
template <typename T>
void SumInto(void* c, const void* a, const void* b, size_t n) {
  T* out = static_cast<T*>(c);
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<T>(x[i] + y[i]);
}

template <typename T>
void AllReduceSum(const std::shared_ptr<gloo::Context>& context, torch::Tensor& t, uint32_t tag,
                  std::chrono::milliseconds timeout) {
  gloo::AllreduceOptions options(context);
  options.setOutput(t.data_ptr<T>(), static_cast<size_t>(t.numel()));
  options.setReduceFunction(&SumInto<T>);
  options.setTag(tag);
  options.setTimeout(timeout);
  gloo::allreduce(options);
}

class GlooWork final : public Work {
 public:
  void Wait() override {
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [this] { return done_; });
    if (!error_.empty()) throw CommunicationError(error_);
  }

  void Finish(std::string error) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
      error_ = std::move(error);
    }
    done_cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable done_cv_;
  bool done_ = false;  // guarded by mu_
  std::string error_;  // guarded by mu_; empty on success
};

class GlooCommunicator final : public Communicator {
 public:
  GlooCommunicator(std::shared_ptr<gloo::transport::Device> device,
                   std::shared_ptr<gloo::Context> context, std::chrono::milliseconds timeout)
      : device_(std::move(device)),
        context_(std::move(context)),
        timeout_(timeout),
        thread_([this] { Loop(); }) {}

  ~GlooCommunicator() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    queue_cv_.notify_all();
    thread_.join();  // runs what is queued first; each collective is bounded by timeout_
  }

  int rank() const override { return context_->rank; }
  int world_size() const override { return context_->size; }
  torch::Device device() const override { return torch::kCPU; }
  const char* backend() const override { return "gloo"; }

  std::shared_ptr<Work> AllReduceAsync(torch::Tensor t, ReduceOp op) override {
    CheckTensor(t, "AllReduceAsync");
    CheckReduceOp(t, op);
    const auto dtype = t.scalar_type();
    return Submit("all-reduce", [this, t, dtype, op](uint32_t tag) mutable {
      switch (dtype) {
        case torch::kFloat:
          AllReduceSum<float>(context_, t, tag, timeout_);
          break;
        case torch::kDouble:
          AllReduceSum<double>(context_, t, tag, timeout_);
          break;
        case torch::kBFloat16:
          AllReduceSum<c10::BFloat16>(context_, t, tag, timeout_);
          break;
        case torch::kHalf:
          AllReduceSum<c10::Half>(context_, t, tag, timeout_);
          break;
        case torch::kInt:
          AllReduceSum<int32_t>(context_, t, tag, timeout_);
          break;
        case torch::kLong:
          AllReduceSum<int64_t>(context_, t, tag, timeout_);
          break;
        case torch::kByte:
          AllReduceSum<uint8_t>(context_, t, tag, timeout_);
          break;
        default:
          throw std::invalid_argument(std::string("unsupported dtype ") + c10::toString(dtype));
      }
      if (op == ReduceOp::kMean) {
        torch::NoGradGuard no_grad;
        t.div_(world_size());
      }
    });
  }

  void Broadcast(torch::Tensor t, int root) override {
    CheckTensor(t, "Broadcast");
    if (root < 0 || root >= world_size()) {
      throw std::invalid_argument("gloo Broadcast: root " + std::to_string(root) +
                                  " is not a rank of " + std::to_string(world_size()));
    }
    Submit("broadcast", [this, t, root](uint32_t tag) mutable {
      auto* bytes = static_cast<uint8_t*>(t.data_ptr());
      const size_t size = static_cast<size_t>(t.numel()) * t.element_size();
      gloo::BroadcastOptions options(context_);
      if (rank() == root) options.setInput(bytes, size);
      options.setOutput(bytes, size);
      options.setRoot(root);
      options.setTag(tag);
      options.setTimeout(timeout_);
      gloo::broadcast(options);
    })->Wait();
  }

  void Barrier() override {
    Submit("barrier", [this](uint32_t tag) {
      gloo::BarrierOptions options(context_);
      options.setTag(tag);
      options.setTimeout(timeout_);
      gloo::barrier(options);
    })->Wait();
  }

 private:
  struct Op {
    const char* name;
    std::function<void(uint32_t tag)> run;
    std::shared_ptr<GlooWork> work;
  };

  static void CheckTensor(const torch::Tensor& t, const char* what) {
    if (!t.defined() || !t.device().is_cpu() || !t.is_contiguous()) {
      throw std::invalid_argument(std::string("gloo ") + what +
                                  ": the tensor must be a defined, contiguous CPU tensor");
    }
  }

  std::shared_ptr<GlooWork> Submit(const char* name, std::function<void(uint32_t)> run) {
    auto work = std::make_shared<GlooWork>();
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(Op{name, std::move(run), work});
    }
    queue_cv_.notify_one();
    return work;
  }

  void Loop() {
    uint32_t next_tag = 0;  // the same sequence on every rank: collectives run in order
    std::string broken;     // first failure; later collectives fail fast with it
    while (true) {
      Op op;
      {
        std::unique_lock<std::mutex> lock(mu_);
        queue_cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stopping and drained
        op = std::move(queue_.front());
        queue_.pop_front();
      }
      const uint32_t tag = next_tag++;
      if (!broken.empty()) {
        op.work->Finish(std::string("gloo ") + op.name + " on rank " + std::to_string(rank()) +
                        " not run: the communicator failed earlier: " + broken);
        continue;
      }
      try {
        if (op.run) op.run(tag);
        op.work->Finish("");
      } catch (const std::exception& e) {
        broken = std::string("gloo ") + op.name + " failed on rank " + std::to_string(rank()) +
                 " of " + std::to_string(world_size()) + ": " + e.what();
        op.work->Finish(broken);
      }
    }
  }

  // Constant after construction.
  const std::shared_ptr<gloo::transport::Device> device_;
  const std::shared_ptr<gloo::Context> context_;  // used by the communication thread only
  const std::chrono::milliseconds timeout_;

  std::mutex mu_;
  std::condition_variable queue_cv_;
  std::deque<Op> queue_;   // guarded by mu_
  bool stopping_ = false;  // guarded by mu_

  std::thread thread_;  // last: starts after every member above exists
};

}  // namespace

Result<std::unique_ptr<Communicator>> MakeGlooCommunicator(
    KeyValueStore* store, int rank, int world_size, std::chrono::steady_clock::time_point deadline,
    std::chrono::milliseconds rendezvous_timeout, std::chrono::milliseconds operation_timeout) {
  ADCTL_RETURN_IF_ERROR(
      AwaitAllRanks(store, "gloo", rank, world_size, deadline, rendezvous_timeout));
  gloo::transport::tcp::attr attr;
  if (const char* ifname = std::getenv("ADCTL_GLOO_IFNAME"); ifname && *ifname) {
    attr.iface = ifname;
  } else if (const char* host = std::getenv("ADCTL_GLOO_HOST"); host && *host) {
    attr.hostname = host;
  } else {
    attr.hostname = "127.0.0.1";
  }
  try {
    std::shared_ptr<gloo::transport::Device> device = gloo::transport::tcp::CreateDevice(attr);
    auto context = std::make_shared<gloo::rendezvous::Context>(rank, world_size);
    context->setTimeout(TimeLeft(deadline, std::chrono::milliseconds(1000)));
    KeyValueGlooStore gloo_store(store, "gloo/mesh/", deadline);
    context->connectFullMesh(gloo_store, device);
    context->setTimeout(operation_timeout);
    return std::unique_ptr<Communicator>(std::make_unique<GlooCommunicator>(
        std::move(device), std::move(context), operation_timeout));
  } catch (const std::exception& e) {
    const bool late = std::chrono::steady_clock::now() >= deadline;
    return Status(
        late ? StatusCode::kDeadlineExceeded : StatusCode::kUnavailable,
        "gloo rendezvous: rank " + std::to_string(rank) + " of " + std::to_string(world_size) +
            " could not connect to its peers (listening on " +
            (attr.iface.empty() ? attr.hostname : "interface " + attr.iface) + "): " + e.what());
  }
}

}  // namespace adctl

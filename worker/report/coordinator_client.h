// The rank's side of adctl.v1.WorkerService: registration, heartbeats, metrics and events to
// adctld, and the rendezvous key-value store. Torch-free.
//
// Connect() registers the rank (job id, attempt, rank, world size, pid, host) and starts one
// background thread that, every heartbeat interval (or at once when something urgent is
// queued), sends queued step metrics and events and then a heartbeat. The training thread
// never waits for the network: OnStep/OnCheckpoint/OnEvent only enqueue. When adctld is
// unreachable (restarting) the queue is kept (bounded: the oldest step metrics are dropped
// first) and sent once it is back; the rank keeps training and re-attaches with its next
// heartbeat. StopRequested() becomes true when a heartbeat reply says stop (pause/cancel), or
// when adctld says this attempt was superseded.
//
// The destructor flushes what is queued (up to 10 s) — destroy the client after the final
// checkpoint is reported and before exiting, so adctld records it.
//
// adctld may come back on another address (restarted on port 0): with an `address_file` (the
// data directory's adctld.json), a rank whose calls fail as unreachable re-reads it, at most
// once a second, and moves to the address it names; what it queued meanwhile goes there.
//
// KV keys are scoped server-side to (job id, attempt): a restarted attempt never sees the
// previous attempt's keys. Thread-safe.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "adctl/v1/worker_service.grpc.pb.h"
#include "common/status.h"
#include "worker/dist/kv_store.h"
#include "worker/report/reporter.h"

namespace adctl {

class CoordinatorClient : public Reporter, public KeyValueStore {
 public:
  // Registers with adctld at `address` ("host:port"), retrying UNAVAILABLE for up to
  // `connect_timeout`. Errors: PermissionDenied (wrong token), FailedPrecondition (attempt
  // superseded or job ended), Unavailable (adctld not reachable in time).
  static Result<std::unique_ptr<CoordinatorClient>> Connect(
      const std::string& address, const std::string& job_id, int attempt, int rank, int world_size,
      const std::string& token,
      std::chrono::milliseconds connect_timeout = std::chrono::seconds(60),
      std::string address_file = "");
  ~CoordinatorClient() override;

  // Reporter.
  void OnTrainingStarted(int64_t resumed_from_step, int64_t total_steps) override;
  void OnStep(const StepReport& report) override;
  void OnCheckpoint(const CheckpointReport& report) override;
  void OnEvent(EventLevel level, const std::string& message) override;
  void OnSamples(const SamplesReport& report) override;
  bool StopRequested() override { return stop_requested_.load(); }

  // KeyValueStore (rendezvous). Set retries UNAVAILABLE for up to a minute.
  Status Set(const std::string& key, const std::string& value) override;
  Result<std::string> Get(const std::string& key, std::chrono::milliseconds timeout) override;

  // Sends everything queued; false when the deadline passed first.
  bool Flush(std::chrono::milliseconds timeout);
  // Where to keep what could not be sent (adctl.v1.PendingReports; the job folder's
  // rank_pending_reports): written whenever a send fails, removed once the queue is out, and
  // taken by adctld when the attempt ends, so a rank killed while adctld was away loses nothing.
  void SetSpillPath(std::string path);
  // How often the coordinator wants a heartbeat (RegisterRank told it).
  int heartbeat_interval_ms() const { return heartbeat_interval_ms_; }

 private:
  CoordinatorClient(std::string address, std::string address_file, std::string job_id, int attempt,
                    int rank, std::string token);
  // The stub of the current address (callers keep it alive while they use it).
  std::shared_ptr<v1::WorkerService::Stub> Stub();
  // After an unreachable call: re-reads address_file_ (at most once a second) and moves to the
  // address it names when that changed.
  void Rediscover();
  std::unique_ptr<grpc::ClientContext> Context(std::chrono::milliseconds timeout) const;
  void RunSender();
  // Sends queued metrics and events once, each call bounded by `rpc_timeout`; false when
  // adctld did not take them.
  bool SendQueued(std::chrono::milliseconds rpc_timeout = std::chrono::seconds(5));
  void SendHeartbeat();
  void Enqueue(v1::WorkerEvent event, bool urgent);
  // Writes the queue to spill_path_ (atomically), or removes the file once the queue is empty.
  void SpillLocked();

  // Constant after construction.
  const std::string address_file_;
  v1::RankRef ref_;
  std::string token_;
  int heartbeat_interval_ms_ = 1000;
  int pid_ = 0;

  std::mutex stub_mu_;
  std::string address_;                                // guarded by stub_mu_
  std::shared_ptr<v1::WorkerService::Stub> stub_;      // guarded by stub_mu_
  std::chrono::steady_clock::time_point last_lookup_;  // guarded by stub_mu_

  std::mutex send_mu_;  // serialises SendQueued (sender thread vs. Flush)
  std::atomic<bool> stop_requested_{false};
  std::atomic<int64_t> last_step_{0};

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<v1::MetricPoint> metrics_;  // guarded by mu_
  std::deque<v1::WorkerEvent> events_;   // guarded by mu_
  bool urgent_ = false;                  // guarded by mu_
  bool shutting_down_ = false;           // guarded by mu_
  bool in_flight_ = false;               // guarded by mu_; a batch is being sent
  int64_t dropped_metrics_ = 0;          // guarded by mu_; since the last delivery
  int64_t dropped_events_ = 0;           // guarded by mu_
  std::string spill_path_;               // guarded by mu_; "" : no spilling
  bool spilled_ = false;                 // guarded by mu_; the spill file holds something
  std::thread sender_;
};

}  // namespace adctl

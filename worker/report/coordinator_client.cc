#include "worker/report/coordinator_client.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/clock.h"
#include "common/worker_contract.h"
#include "proto/channel_credentials.h"
#include "proto/grpc_status.h"
#include "proto/metric_point.h"
#include "proto/record_values.h"

namespace adctl {

namespace {

constexpr size_t kMaxQueuedMetrics = 10000;
constexpr size_t kMaxQueuedEvents = 1000;

// TLS when adctld gave its ranks a CA to verify it with (ADCTL_TLS_CA, a PEM file).
std::shared_ptr<grpc::ChannelCredentials> Credentials() {
  const char* ca = std::getenv("ADCTL_TLS_CA");
  TlsClientFiles files;
  if (ca != nullptr) files.ca = ca;
  std::string error;
  auto credentials = ChannelCredentialsFor(files, &error);
  if (!error.empty()) spdlog::error("{}", error);
  return credentials;
}

std::shared_ptr<grpc::Channel> NewChannel(const std::string& address) {
  grpc::ChannelArguments args;
  // Reconnect quickly after an adctld restart.
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 500);
  args.SetInt(GRPC_ARG_DNS_MIN_TIME_BETWEEN_RESOLUTIONS_MS, 500);
  return grpc::CreateCustomChannel(address, Credentials(), args);
}

// CANCELLED too: a stopping adctld cancels the calls in flight (its successor takes them).
bool Retryable(const grpc::Status& st) {
  return st.error_code() == grpc::StatusCode::UNAVAILABLE ||
         st.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED ||
         st.error_code() == grpc::StatusCode::CANCELLED;
}

const char* LevelName(EventLevel level) {
  switch (level) {
    case EventLevel::kInfo:
      return "info";
    case EventLevel::kWarning:
      return "warning";
    case EventLevel::kError:
      return "error";
  }
  return "info";
}

}  // namespace

CoordinatorClient::CoordinatorClient(std::string address, std::string address_file,
                                     std::string job_id, int attempt, int rank, std::string token)
    : address_file_(std::move(address_file)),
      token_(std::move(token)),
      pid_(static_cast<int>(getpid())),
      address_(std::move(address)),
      stub_(v1::WorkerService::NewStub(NewChannel(address_))) {
  ref_.set_job_id(std::move(job_id));
  ref_.set_attempt(attempt);
  ref_.set_rank(rank);
}

std::shared_ptr<v1::WorkerService::Stub> CoordinatorClient::Stub() {
  std::lock_guard<std::mutex> lock(stub_mu_);
  return stub_;
}

void CoordinatorClient::Rediscover() {
  if (address_file_.empty()) return;
  std::lock_guard<std::mutex> lock(stub_mu_);
  const auto now = std::chrono::steady_clock::now();
  if (now - last_lookup_ < std::chrono::seconds(1)) return;
  last_lookup_ = now;
  std::ifstream in(address_file_);
  const auto info = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!info.is_object() || !info.contains("grpc") || !info["grpc"].is_string()) return;
  const std::string address = info["grpc"].get<std::string>();
  if (address.empty() || address == address_) return;
  spdlog::info("adctld is now at {} ({}; was {})", address, address_file_, address_);
  address_ = address;
  stub_ = v1::WorkerService::NewStub(NewChannel(address_));
}

std::unique_ptr<grpc::ClientContext> CoordinatorClient::Context(
    std::chrono::milliseconds timeout) const {
  auto ctx = std::make_unique<grpc::ClientContext>();
  if (!token_.empty()) ctx->AddMetadata("authorization", "Bearer " + token_);
  ctx->set_deadline(std::chrono::system_clock::now() + timeout);
  return ctx;
}

Result<std::unique_ptr<CoordinatorClient>> CoordinatorClient::Connect(
    const std::string& address, const std::string& job_id, int attempt, int rank, int world_size,
    const std::string& token, std::chrono::milliseconds connect_timeout, std::string address_file) {
  std::unique_ptr<CoordinatorClient> client(
      new CoordinatorClient(address, std::move(address_file), job_id, attempt, rank, token));

  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  v1::RegisterRankRequest req;
  *req.mutable_ref() = client->ref_;
  req.set_world_size(world_size);
  req.set_pid(client->pid_);
  req.set_host(host);
  const auto deadline = std::chrono::steady_clock::now() + connect_timeout;
  while (true) {
    v1::RegisterRankResponse resp;
    auto ctx = client->Context(std::chrono::seconds(5));
    grpc::Status st = client->Stub()->RegisterRank(ctx.get(), req, &resp);
    if (st.ok()) {
      if (resp.heartbeat_interval_ms() > 0) {
        client->heartbeat_interval_ms_ = resp.heartbeat_interval_ms();
      }
      break;
    }
    if (Retryable(st)) client->Rediscover();
    if (!Retryable(st) || std::chrono::steady_clock::now() >= deadline) {
      Status s = FromGrpcStatus(st);
      return Status(s.code(), "register rank " + std::to_string(rank) + " of job " + job_id +
                                  " attempt " + std::to_string(attempt) + " with adctld at " +
                                  address + ": " + s.message());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  client->sender_ = std::thread([c = client.get()] { c->RunSender(); });
  return client;
}

CoordinatorClient::~CoordinatorClient() {
  Flush(std::chrono::seconds(10));
  {
    std::lock_guard<std::mutex> lock(mu_);
    shutting_down_ = true;
  }
  cv_.notify_all();
  if (sender_.joinable()) sender_.join();
}

void CoordinatorClient::Enqueue(v1::WorkerEvent event, bool urgent) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (events_.size() >= kMaxQueuedEvents) {
      events_.pop_front();
      ++dropped_events_;
    }
    events_.push_back(std::move(event));
    urgent_ = urgent_ || urgent;
  }
  if (urgent) cv_.notify_all();
}

void CoordinatorClient::OnTrainingStarted(int64_t resumed_from_step, int64_t total_steps) {
  v1::WorkerEvent e;
  e.set_kind(v1::WorkerEvent::KIND_TRAINING_STARTED);
  e.set_level("info");
  e.set_time(NowSeconds());
  e.set_resumed_from_step(resumed_from_step);
  e.set_total_steps(total_steps);
  last_step_ = resumed_from_step;
  Enqueue(std::move(e), /*urgent=*/true);
}

void CoordinatorClient::OnStep(const StepReport& r) {
  v1::MetricPoint p;
  MetricValuesToProto(r, &p);
  last_step_ = r.step;
  std::lock_guard<std::mutex> lock(mu_);
  if (metrics_.size() >= kMaxQueuedMetrics) {
    metrics_.pop_front();
    ++dropped_metrics_;
  }
  metrics_.push_back(std::move(p));
}

void CoordinatorClient::OnCheckpoint(const CheckpointReport& r) {
  v1::WorkerEvent e;
  e.set_kind(v1::WorkerEvent::KIND_CHECKPOINT);
  e.set_level("info");
  e.set_time(NowSeconds());
  e.set_message("checkpoint step " + std::to_string(r.step));
  v1::Checkpoint* c = e.mutable_checkpoint();
  ValuesToProto(r, kCheckpointValues, c);
  c->set_created_at(NowSeconds());
  c->set_attempt(ref_.attempt());
  c->set_on_disk(true);
  Enqueue(std::move(e), /*urgent=*/true);
}

void CoordinatorClient::OnEvent(EventLevel level, const std::string& message) {
  v1::WorkerEvent e;
  e.set_kind(v1::WorkerEvent::KIND_MESSAGE);
  e.set_level(LevelName(level));
  e.set_time(NowSeconds());
  e.set_message(message);
  Enqueue(std::move(e), level != EventLevel::kInfo);
}

void CoordinatorClient::OnSamples(const SamplesReport& r) {
  v1::WorkerEvent e;
  e.set_kind(v1::WorkerEvent::KIND_SAMPLES);
  e.set_level("info");
  e.set_time(NowSeconds());
  e.set_message(DescribeSamples(r));
  for (const SampleFile& f : r.files) {
    v1::Sample* s = e.add_samples();
    ValuesToProto(f, kSampleValues, s);
    s->set_step(r.step);
    s->set_attempt(ref_.attempt());
    s->set_created_at(e.time());
    if (f.render_seconds <= 0) s->set_render_seconds(r.seconds);
  }
  Enqueue(std::move(e), /*urgent=*/true);
}

bool CoordinatorClient::SendQueued(std::chrono::milliseconds rpc_timeout) {
  std::lock_guard<std::mutex> send_lock(send_mu_);
  std::vector<v1::MetricPoint> metrics;
  std::vector<v1::WorkerEvent> events;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (metrics_.empty() && events_.empty()) return true;
    // At most kMaxPointsPerReport points a call; the events wait until the points queued before
    // them are all out (a checkpoint event never precedes the steps it covers).
    const size_t n = std::min(metrics_.size(), kMaxPointsPerReport);
    metrics.assign(metrics_.begin(), metrics_.begin() + static_cast<std::ptrdiff_t>(n));
    if (n == metrics_.size()) events.assign(events_.begin(), events_.end());
    in_flight_ = true;
  }
  bool ok = true;
  // Metrics first: a checkpoint event then never precedes the steps it covers.
  if (!metrics.empty()) {
    v1::ReportMetricsRequest req;
    *req.mutable_ref() = ref_;
    for (auto& m : metrics) *req.add_points() = m;
    v1::ReportMetricsResponse resp;
    auto ctx = Context(rpc_timeout);
    grpc::Status st = Stub()->ReportMetrics(ctx.get(), req, &resp);
    if (st.ok() || !Retryable(st)) {
      if (!st.ok()) spdlog::warn("adctld refused metrics: {}", st.error_message());
      std::lock_guard<std::mutex> lock(mu_);
      // Points queued meanwhile stay; the sent ones were at the front.
      metrics_.erase(metrics_.begin(),
                     metrics_.begin() + std::min(metrics_.size(), metrics.size()));
      // adctld is back: the job's events say what the bounded queue had to drop meanwhile.
      if (dropped_metrics_ > 0 || dropped_events_ > 0) {
        v1::WorkerEvent e;
        e.set_level("warning");
        e.set_time(NowSeconds());
        e.set_message("rank " + std::to_string(ref_.rank()) + ": " +
                      std::to_string(dropped_metrics_) + " step metric point(s) and " +
                      std::to_string(dropped_events_) +
                      " event(s) were dropped while adctld could not take them (the rank keeps " +
                      std::to_string(kMaxQueuedMetrics) + " points and " +
                      std::to_string(kMaxQueuedEvents) + " events)");
        dropped_metrics_ = dropped_events_ = 0;
        // Right after the events of this batch, so that sending it removes exactly those.
        events_.insert(
            events_.begin() + static_cast<std::ptrdiff_t>(std::min(events_.size(), events.size())),
            e);
        events.push_back(std::move(e));
      }
    } else {
      ok = false;
    }
  }
  if (ok && !events.empty()) {
    v1::ReportEventsRequest req;
    *req.mutable_ref() = ref_;
    for (auto& e : events) *req.add_events() = e;
    v1::ReportEventsResponse resp;
    auto ctx = Context(rpc_timeout);
    grpc::Status st = Stub()->ReportEvents(ctx.get(), req, &resp);
    if (st.ok() || !Retryable(st)) {
      if (!st.ok()) spdlog::warn("adctld refused events: {}", st.error_message());
      std::lock_guard<std::mutex> lock(mu_);
      events_.erase(events_.begin(), events_.begin() + std::min(events_.size(), events.size()));
    } else {
      ok = false;
    }
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    in_flight_ = false;
    // Not delivered: kept on disk too, in case this rank dies before adctld is back. Delivered
    // (all of it): the file goes.
    if (!ok || (spilled_ && metrics_.empty() && events_.empty())) SpillLocked();
  }
  cv_.notify_all();
  return ok;
}

void CoordinatorClient::SetSpillPath(std::string path) {
  std::lock_guard<std::mutex> lock(mu_);
  spill_path_ = std::move(path);
}

void CoordinatorClient::SpillLocked() {
  if (spill_path_.empty()) return;
  if (metrics_.empty() && events_.empty()) {
    std::remove(spill_path_.c_str());
    spilled_ = false;
    return;
  }
  v1::PendingReports pending;
  *pending.mutable_ref() = ref_;
  for (const v1::MetricPoint& p : metrics_) *pending.add_points() = p;
  for (const v1::WorkerEvent& e : events_) *pending.add_events() = e;
  const std::string tmp = spill_path_ + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out || !pending.SerializeToOstream(&out) || !out.flush()) {
      spdlog::warn("cannot keep {} undelivered report(s) in {}", metrics_.size() + events_.size(),
                   spill_path_);
      return;
    }
  }
  if (std::rename(tmp.c_str(), spill_path_.c_str()) == 0) spilled_ = true;
}

void CoordinatorClient::SendHeartbeat() {
  v1::HeartbeatRequest req;
  *req.mutable_ref() = ref_;
  req.set_step(last_step_.load());
  req.set_pid(pid_);
  v1::HeartbeatResponse resp;
  auto ctx = Context(std::chrono::seconds(5));
  grpc::Status st = Stub()->Heartbeat(ctx.get(), req, &resp);
  if (st.ok()) {
    if (resp.stop() && !stop_requested_.exchange(true)) {
      spdlog::info("adctld asks this rank to stop ({})", resp.reason());
    }
  } else if (st.error_code() == grpc::StatusCode::FAILED_PRECONDITION ||
             st.error_code() == grpc::StatusCode::NOT_FOUND) {
    if (!stop_requested_.exchange(true)) {
      spdlog::warn("adctld no longer knows this attempt ({}); stopping", st.error_message());
    }
  } else if (!Retryable(st)) {
    spdlog::warn("heartbeat: {}", st.error_message());
  } else {
    Rediscover();
  }
}

void CoordinatorClient::RunSender() {
  // Step metrics go out at least every 250 ms (live progress), heartbeats every interval.
  constexpr auto kMetricsPeriod = std::chrono::milliseconds(250);
  auto next_heartbeat = std::chrono::steady_clock::now();
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      const auto wake = std::min(next_heartbeat, std::chrono::steady_clock::now() + kMetricsPeriod);
      cv_.wait_until(lock, wake, [this] { return shutting_down_ || urgent_; });
      if (shutting_down_) return;
      urgent_ = false;
    }
    SendQueued();
    if (std::chrono::steady_clock::now() >= next_heartbeat) {
      SendHeartbeat();
      next_heartbeat =
          std::chrono::steady_clock::now() + std::chrono::milliseconds(heartbeat_interval_ms_);
    }
  }
}

bool CoordinatorClient::Flush(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      // Let an in-flight batch finish rather than sending it twice.
      cv_.wait_until(lock, deadline, [this] { return !in_flight_; });
      if (metrics_.empty() && events_.empty()) return true;
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    if (SendQueued(std::min<std::chrono::milliseconds>(left, std::chrono::seconds(5)))) {
      std::lock_guard<std::mutex> lock(mu_);
      if (metrics_.empty() && events_.empty()) return true;
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (!metrics_.empty() || !events_.empty()) {
    spdlog::warn("adctld unreachable: {} metric point(s) and {} event(s) not delivered",
                 metrics_.size(), events_.size());
  }
  return metrics_.empty() && events_.empty();
}

Status CoordinatorClient::Set(const std::string& key, const std::string& value) {
  v1::KvSetRequest req;
  *req.mutable_ref() = ref_;
  req.set_key(key);
  req.set_value(value);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(1);
  while (true) {
    v1::KvSetResponse resp;
    auto ctx = Context(std::chrono::seconds(5));
    grpc::Status st = Stub()->KvSet(ctx.get(), req, &resp);
    if (st.ok()) return Status::Ok();
    if (Retryable(st)) Rediscover();
    if (!Retryable(st) || std::chrono::steady_clock::now() >= deadline) {
      Status s = FromGrpcStatus(st);
      return Status(s.code(), "rendezvous set '" + key + "': " + s.message());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

Result<std::string> CoordinatorClient::Get(const std::string& key,
                                           std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    v1::KvGetRequest req;
    *req.mutable_ref() = ref_;
    req.set_key(key);
    req.set_timeout_ms(static_cast<int>(std::min<int64_t>(left.count(), 30000)));
    v1::KvGetResponse resp;
    auto ctx = Context(std::chrono::milliseconds(req.timeout_ms()) + std::chrono::seconds(5));
    grpc::Status st = Stub()->KvGet(ctx.get(), req, &resp);
    if (st.ok()) {
      if (resp.found()) return resp.value();
      continue;  // server-side wait ended; ask again until our own deadline
    }
    if (!Retryable(st)) {
      Status s = FromGrpcStatus(st);
      return Status(s.code(), "rendezvous get '" + key + "': " + s.message());
    }
    Rediscover();
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  return Status(StatusCode::kDeadlineExceeded, "rendezvous key '" + key + "' not set within " +
                                                   std::to_string(timeout.count() / 1000.0) +
                                                   " s (job " + ref_.job_id() + " attempt " +
                                                   std::to_string(ref_.attempt()) + ")");
}

}  // namespace adctl

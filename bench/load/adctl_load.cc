// adctl_load: many clients against one adctld over the public JobService, as CI pipelines and
// dashboards would hit it. Each client submits its share of jobs (unique submission ids) and,
// between submits, lists a page of jobs and gets one it submitted; every call's latency is kept.
// Prints one JSON object: per call p50/p99/max in ms, calls, errors (with the first messages),
// and whether paging through every job found all that were submitted.
//
// usage: adctl_load --server HOST:PORT [--clients 50] [--jobs 1000] [--token T]
#include <grpcpp/grpcpp.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <iostream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "adctl/v1/job_service.grpc.pb.h"

namespace {

namespace v1 = adctl::v1;
using Clock = std::chrono::steady_clock;

// A job that can never start while the slot is held by the training job: it waits QUEUED.
const char* kQueuedSpec =
    "name: load\n"
    "model: {preset: tiny}\n"
    "data: {kind: synthetic, num_samples: 16, frames: 4, height: 8, width: 8}\n"
    "train: {max_steps: 2, batch_size: 1}\n"
    "resources: {gpus: 1, priority: -5}\n";

struct Samples {
  std::mutex mu;
  std::map<std::string, std::vector<double>> ms;  // call → latencies
  std::map<std::string, int> errors;
  std::vector<std::string> first_errors;

  void Add(const std::string& call, double ms_value, const grpc::Status& st) {
    std::lock_guard<std::mutex> lock(mu);
    ms[call].push_back(ms_value);
    if (!st.ok()) {
      ++errors[call];
      if (first_errors.size() < 5) first_errors.push_back(call + ": " + st.error_message());
    }
  }
};

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * (v.size() - 1) + 0.5))];
}

}  // namespace

int main(int argc, char** argv) {
  std::string server, token;
  int clients = 50, jobs = 1000;
  CLI::App app{"adctl_load: concurrent JobService clients against one adctld"};
  app.add_option("--server", server, "adctld gRPC address")->required();
  app.add_option("--clients", clients, "concurrent clients")->check(CLI::Range(1, 1000));
  app.add_option("--jobs", jobs, "jobs submitted in all")->check(CLI::Range(1, 100000));
  app.add_option("--token", token, "bearer token (or env ADCTL_TOKEN)");
  CLI11_PARSE(app, argc, argv);
  if (token.empty()) {
    if (const char* t = std::getenv("ADCTL_TOKEN")) token = t;
  }
  const auto context = [&token] {
    auto ctx = std::make_unique<grpc::ClientContext>();
    if (!token.empty()) ctx->AddMetadata("authorization", "Bearer " + token);
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    return ctx;
  };
  const auto ms_since = [](Clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  };

  Samples samples;
  std::mutex ids_mu;
  std::set<std::string> submitted;
  std::atomic<int> next{0};
  const std::string run =
      std::to_string(std::chrono::system_clock::now().time_since_epoch().count());
  const auto t_start = Clock::now();
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      auto stub =
          v1::JobService::NewStub(grpc::CreateChannel(server, grpc::InsecureChannelCredentials()));
      std::mt19937 rng(c);
      std::vector<std::string> mine;
      for (int i = next++; i < jobs; i = next++) {
        v1::SubmitJobRequest submit;
        submit.set_spec_yaml(kQueuedSpec);
        submit.set_submission_id("load-" + run + "-" + std::to_string(i));
        v1::SubmitJobResponse created;
        auto t0 = Clock::now();
        grpc::Status st = stub->SubmitJob(context().get(), submit, &created);
        samples.Add("submit", ms_since(t0), st);
        if (st.ok()) {
          mine.push_back(created.job().id());
          std::lock_guard<std::mutex> lock(ids_mu);
          submitted.insert(created.job().id());
        }
        v1::ListJobsRequest list;
        list.set_page_size(100);
        v1::ListJobsResponse listed;
        t0 = Clock::now();
        st = stub->ListJobs(context().get(), list, &listed);
        samples.Add("list", ms_since(t0), st);
        if (!mine.empty()) {
          v1::GetJobRequest get;
          get.set_job_id(mine[rng() % mine.size()]);
          v1::Job job;
          t0 = Clock::now();
          st = stub->GetJob(context().get(), get, &job);
          samples.Add("get", ms_since(t0), st);
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  const double seconds = std::chrono::duration<double>(Clock::now() - t_start).count();

  // Paging through every job must find each one submitted.
  auto stub =
      v1::JobService::NewStub(grpc::CreateChannel(server, grpc::InsecureChannelCredentials()));
  std::set<std::string> seen;
  v1::ListJobsRequest page;
  page.set_page_size(1000);
  int pages = 0;
  while (pages++ < 1000) {
    v1::ListJobsResponse resp;
    grpc::Status st = stub->ListJobs(context().get(), page, &resp);
    samples.Add("list_all", 0, st);
    if (!st.ok()) break;
    for (const auto& j : resp.jobs()) seen.insert(j.id());
    if (resp.next_page_token().empty()) break;
    page.set_page_token(resp.next_page_token());
  }
  int missing = 0;
  for (const auto& id : submitted) missing += seen.count(id) == 0;

  nlohmann::json out = {{"clients", clients},           {"jobs", jobs},
                        {"seconds", seconds},           {"submitted", submitted.size()},
                        {"missing_from_list", missing}, {"first_errors", samples.first_errors}};
  int errors = 0;
  for (const auto& [call, v] : samples.ms) {
    if (call == "list_all") continue;
    out["calls"][call] = {{"count", v.size()},
                          {"p50_ms", Percentile(v, 0.5)},
                          {"p99_ms", Percentile(v, 0.99)},
                          {"max_ms", Percentile(v, 1.0)},
                          {"errors", samples.errors[call]}};
  }
  for (const auto& [call, n] : samples.errors) errors += n;
  out["errors"] = errors;
  std::cout << out.dump(2) << "\n";
  return errors == 0 && missing == 0 && static_cast<int>(submitted.size()) == jobs ? 0 : 1;
}

// adctl watch and wait, and the end of submit --follow and --wait: following a job until it
// ends, the outcome it ends with, and the exit code by outcome.
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <thread>

#include "cli/commands/commands.h"
#include "cli/render.h"
#include "common/job_layout.h"
#include "common/job_spec.h"

namespace adctl::cli {
namespace {

int ExitCodeFor(v1::JobState state) {
  switch (state) {
    case v1::JOB_STATE_SUCCEEDED:
      return kExitSucceeded;
    case v1::JOB_STATE_CANCELLED:
      return kExitCancelled;
    default:
      return kExitFailed;
  }
}

// The folder holding a job's checkpoints: where its newest one was written (checkpoint.dir
// when the spec sets one), else the job folder's default.
std::string CheckpointFolder(Client& client, const v1::Job& job) {
  v1::ListCheckpointsRequest req;
  req.set_job_id(job.id());
  v1::ListCheckpointsResponse resp;
  auto ctx = client.Context();
  std::string newest;
  if (client.stub().ListCheckpoints(ctx.get(), req, &resp).ok()) {
    for (const v1::Checkpoint& c : resp.checkpoints()) {
      if (c.step() == job.progress().last_checkpoint_step() || newest.empty()) newest = c.path();
    }
  }
  if (!newest.empty()) return std::filesystem::path(newest).parent_path().string();
  // None listed: where the job's layout puts them (checkpoint.dir when its spec sets one).
  std::string spec_dir;
  if (!job.spec_yaml().empty()) {
    if (auto spec = ParseJobSpec(job.spec_yaml()); spec.ok()) spec_dir = spec->checkpoint.dir;
  }
  return JobLayout(job.job_dir()).checkpoints(spec_dir);
}

void PrintOutcome(Client& client, const v1::Job& job) {
  std::cout << job.id() << " " << StateName(job.state());
  if (!job.message().empty()) std::cout << ": " << job.message();
  std::cout << "\n";
  // A preprocess job writes a latent cache, not checkpoints.
  if (job.state() == v1::JOB_STATE_SUCCEEDED && job.progress().last_checkpoint_step() > 0) {
    std::cout << "  checkpoints: " << CheckpointFolder(client, job) << " (last step "
              << job.progress().last_checkpoint_step() << ")\n";
  } else if (job.state() == v1::JOB_STATE_FAILED) {
    std::cout << "  logs: adctl logs " << job.id() << " --rank 0   (" << job.job_dir()
              << "/logs/)\n";
  }
}

// watch and wait: one JOB and a --timeout.
struct FollowArgs {
  std::string job_id;
  double timeout = 0;
};

}  // namespace

int WaitForJob(Client& client, const std::string& id, double timeout_seconds, bool json) {
  const double deadline = timeout_seconds > 0 ? Now() + timeout_seconds : 0;
  double unreachable_since = 0;
  bool ever_connected = false;
  while (true) {
    v1::GetJobRequest req;
    req.set_job_id(id);
    v1::Job job;
    auto ctx = client.Context(10);
    grpc::Status st = client.stub().GetJob(ctx.get(), req, &job);
    if (st.ok()) {
      unreachable_since = 0;
      ever_connected = true;
      if (IsTerminalState(job.state())) {
        if (json) {
          std::cout << ToJson(job, JsonLayout::kIndented) << "\n";
        } else {
          PrintOutcome(client, job);
        }
        return ExitCodeFor(job.state());
      }
      if (job.state() == v1::JOB_STATE_PAUSED) {
        // Nothing happens to a paused job until someone resumes it: a pipeline must not hang.
        if (json) {
          std::cout << ToJson(job, JsonLayout::kIndented) << "\n";
        } else {
          std::cout << job.id() << " PAUSED: it waits for `adctl resume " << job.id() << "`\n";
        }
        return kExitPaused;
      }
    } else if (ever_connected && (st.error_code() == grpc::StatusCode::UNAVAILABLE ||
                                  st.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED)) {
      // adctld went away after we reached it: most likely a restart; keep trying a while.
      if (unreachable_since == 0) unreachable_since = Now();
      if (Now() - unreachable_since > 60) return client.ReportError(st);
    } else {
      return client.ReportError(st);
    }
    if (deadline > 0 && Now() >= deadline) {
      // With -o json the job as it stands, so a pipeline sees where it got to.
      if (json && st.ok()) std::cout << ToJson(job, JsonLayout::kIndented) << "\n";
      std::cerr << "adctl: timed out after " << FormatDuration(timeout_seconds) << " waiting for "
                << id << " (" << (st.ok() ? StateName(job.state()) : "unknown") << ")\n";
      return kExitTimeout;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }
}

int FollowJob(Client& client, const std::string& id, double timeout_seconds, bool json) {
  const bool tty = !json && isatty(STDOUT_FILENO);
  const double deadline = timeout_seconds > 0 ? Now() + timeout_seconds : 0;
  int64_t last_event = 0;
  double unreachable_since = 0;
  bool ever_connected = false;
  std::string last_line;
  v1::Job job;
  bool have_job = false;
  while (true) {
    v1::WatchJobRequest req;
    req.set_job_id(id);
    req.set_after_event_id(last_event);
    auto ctx = client.Context(deadline > 0 ? deadline - Now() : 0);
    auto reader = client.stub().WatchJob(ctx.get(), req);
    v1::JobUpdate update;
    bool line_open = false;
    auto show = [&](const std::string& line) {
      if (tty) {
        std::cout << "\r\033[K" << line << std::flush;
        line_open = true;
      } else if (line != last_line) {
        std::cout << line << "\n" << std::flush;
      }
      last_line = line;
    };
    while (reader->Read(&update)) {
      unreachable_since = 0;
      ever_connected = true;
      if (json) {
        if (update.has_event()) last_event = update.event().id();
        if (update.has_job()) {
          job = update.job();
          have_job = true;
        }
        std::cout << ToJson(update) << "\n" << std::flush;
        continue;
      }
      if (update.has_event()) {
        const v1::Event& e = update.event();
        last_event = e.id();
        if (line_open) std::cout << "\r\033[K";
        line_open = false;
        std::cout << TimeOfDay(e.time()) << " " << e.message() << "\n";
        if (have_job && tty) show(ProgressLine(job));
      } else if (update.has_job()) {
        job = update.job();
        have_job = true;
        show(ProgressLine(job));
      } else if (update.has_metric() && have_job) {
        const v1::MetricPoint& m = update.metric();
        v1::Progress* p = job.mutable_progress();
        p->set_step(m.step());
        p->set_total_steps(m.total_steps());
        p->set_loss(m.loss());
        p->set_clips_per_second(m.clips_per_second());
        p->set_mfu_ratio(m.mfu_ratio());
        p->set_eta_seconds(m.eta_seconds());  // computed by adctld
        show(ProgressLine(job));
      }
    }
    grpc::Status st = reader->Finish();
    if (line_open) std::cout << "\n";
    if (st.ok() && have_job && IsTerminalState(job.state())) {
      if (!json) PrintOutcome(client, job);
      return ExitCodeFor(job.state());
    }
    if (st.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED && deadline > 0 &&
        Now() >= deadline) {
      std::cerr << "adctl: timed out waiting for " << id << "\n";
      return kExitTimeout;
    }
    if (!st.ok() && st.error_code() != grpc::StatusCode::UNAVAILABLE &&
        st.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED &&
        st.error_code() != grpc::StatusCode::CANCELLED) {
      return client.ReportError(st);
    }
    // The stream broke (adctld restarting): try again for a while.
    if (!ever_connected) return client.ReportError(st);
    if (unreachable_since == 0) unreachable_since = Now();
    if (Now() - unreachable_since > 60) return client.ReportError(st);
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
}

void RegisterWatch(CLI::App& app, Context& ctx) {
  auto a = std::make_shared<FollowArgs>();
  auto* watch = AddJobCommand(app, "watch",
                              "live progress until the job ends; exit code by outcome", &a->job_id);
  watch->add_option("--timeout", a->timeout, "give up after S seconds (exit 4)");
  watch->callback(
      ctx.Run([&ctx, a](Client& c) { return FollowJob(c, a->job_id, a->timeout, ctx.json()); }));
}

void RegisterWait(CLI::App& app, Context& ctx) {
  auto a = std::make_shared<FollowArgs>();
  auto* wait = AddJobCommand(
      app, "wait", "wait until a job ends: exit 0 SUCCEEDED, 1 FAILED, 3 CANCELLED, 4 timeout",
      &a->job_id);
  wait->add_option("--timeout", a->timeout, "give up after S seconds (exit 4)");
  wait->callback(
      ctx.Run([&ctx, a](Client& c) { return WaitForJob(c, a->job_id, a->timeout, ctx.json()); }));
}

}  // namespace adctl::cli

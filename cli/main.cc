// adctl: the command line of the adctl training-job service (thin over adctl.v1.JobService).
//
// Exit codes: 0 ok / job SUCCEEDED, 1 job FAILED or server error, 2 usage or validation error
// (also unknown job ids), 3 job CANCELLED, 4 --timeout passed, 5 adctld unreachable.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <thread>

#include "cli/client.h"
#include "cli/render.h"
#include "common/status.h"

namespace adctl::cli {
namespace {

struct Globals {
  std::string server;
  std::string output = "table";
  bool json() const { return output == "json"; }
};

// With `-o json`: prints the message as JSON and returns true; the caller prints its table else.
bool PrintedAsJson(const Globals& g, const google::protobuf::Message& message) {
  if (!g.json()) return false;
  std::cout << ToJson(message) << "\n";
  return true;
}

double Now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string TimeOfDay(double unix_seconds) {
  time_t t = static_cast<time_t>(unix_seconds);
  char buf[32];
  strftime(buf, sizeof(buf), "%H:%M:%S", localtime(&t));
  return buf;
}

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

void PrintOutcome(const v1::Job& job) {
  std::cout << job.id() << " " << StateName(job.state());
  if (!job.message().empty()) std::cout << ": " << job.message();
  std::cout << "\n";
  if (job.state() == v1::JOB_STATE_SUCCEEDED) {
    std::cout << "  checkpoints: " << job.job_dir() << "/checkpoints (last step "
              << job.progress().last_checkpoint_step() << ")\n";
  } else if (job.state() == v1::JOB_STATE_FAILED) {
    std::cout << "  logs: adctl logs " << job.id() << " --rank 0   (" << job.job_dir()
              << "/logs/)\n";
  }
}

// Polls GetJob until a terminal state; tolerates adctld restarts for up to 60 s.
int WaitForJob(Client& client, const std::string& id, double timeout_seconds, bool quiet) {
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
        if (!quiet) PrintOutcome(job);
        return ExitCodeFor(job.state());
      }
    } else if (ever_connected && (st.error_code() == grpc::StatusCode::UNAVAILABLE ||
                                  st.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED)) {
      // adctld went away after we reached it: most likely a restart; keep trying a while.
      if (unreachable_since == 0) unreachable_since = Now();
      if (Now() - unreachable_since > 60) return ReportError(st, client.server());
    } else {
      return ReportError(st, client.server());
    }
    if (deadline > 0 && Now() >= deadline) {
      std::cerr << "adctl: timed out after " << FormatDuration(timeout_seconds) << " waiting for "
                << id << " (" << (st.ok() ? StateName(job.state()) : "unknown") << ")\n";
      return kExitTimeout;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }
}

// Streams WatchJob with a live progress line until the job ends; reconnects across adctld
// restarts (resuming after the last event seen).
int FollowJob(Client& client, const std::string& id, double timeout_seconds) {
  const bool tty = isatty(STDOUT_FILENO);
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
        p->set_eta_seconds(m.eta_seconds());  // computed by adctld
        show(ProgressLine(job));
      }
    }
    grpc::Status st = reader->Finish();
    if (line_open) std::cout << "\n";
    if (st.ok() && have_job && IsTerminalState(job.state())) {
      PrintOutcome(job);
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
      return ReportError(st, client.server());
    }
    // The stream broke (adctld restarting): try again for a while.
    if (!ever_connected) return ReportError(st, client.server());
    if (unreachable_since == 0) unreachable_since = Now();
    if (Now() - unreachable_since > 60) return ReportError(st, client.server());
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
}

adctl::Result<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return adctl::NotFound(path + ": cannot read the job spec file");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace
}  // namespace adctl::cli

using namespace adctl::cli;  // NOLINT: the entry point only

int main(int argc, char** argv) {
  CLI::App app{
      "adctl — submit and control AnimateDiff training jobs on an adctld coordinator.\n"
      "Exit codes: 0 ok/SUCCEEDED, 1 FAILED or server error, 2 usage or validation error,\n"
      "3 CANCELLED, 4 timed out, 5 adctld unreachable."};
  app.require_subcommand(1);
  Globals g;
  app.add_option("--server", g.server,
                 "adctld address host:port (env ADCTL_SERVER, config `server:`, default "
                 "localhost:50051); token from env ADCTL_TOKEN or `token:` in "
                 "~/.config/adctl/config.yaml");
  app.add_option("-o,--output", g.output, "output format")
      ->check(CLI::IsMember({"table", "json"}))
      ->capture_default_str();

  int rc = 0;
  auto client = [&]() { return Client(ResolveConnection(g.server)); };

  // submit
  auto* submit = app.add_subcommand("submit", "submit a job spec (YAML; docs/job-spec.md)");
  std::string spec_file, submission_id;
  std::vector<std::string> sets;
  std::optional<int> submit_gpus, priority;
  bool submit_wait = false, submit_follow = false;
  double submit_timeout = 0;
  submit->add_option("FILE", spec_file, "job spec file")->required();
  submit->add_option("--set", sets, "override a spec field: --set train.lr=3e-4 (repeatable)");
  submit->add_option("--gpus", submit_gpus, "ranks (GPUs, or CPU slots); overrides resources.gpus");
  submit->add_option("--priority", priority, "higher runs first; overrides resources.priority");
  submit->add_option("--submission-id", submission_id,
                     "idempotency key: resubmitting with the same id returns the same job");
  submit->add_flag("--wait", submit_wait, "wait for the job to end; exit code by outcome");
  submit->add_flag("--follow", submit_follow,
                   "show live progress until the job ends; exit code by outcome");
  submit->add_option("--timeout", submit_timeout, "with --wait/--follow: give up after S seconds");
  submit->callback([&] {
    auto text = ReadFile(spec_file);
    if (!text.ok()) {
      std::cerr << "adctl: " << text.status().message() << "\n";
      rc = kExitUsage;
      return;
    }
    Client c = client();
    adctl::v1::SubmitJobRequest req;
    req.set_spec_yaml(text.value());
    for (const auto& s : sets) req.add_overrides(s);
    if (submit_gpus) req.set_gpus(*submit_gpus);
    if (priority) req.set_priority(*priority);
    req.set_submission_id(submission_id);
    adctl::v1::SubmitJobResponse resp;
    if ((rc = c.Call(&adctl::v1::JobService::Stub::SubmitJob, req, &resp)) != 0) return;
    if (g.json()) {
      std::cout << ToJson(resp) << "\n";
    } else {
      std::cout << (resp.created() ? "submitted " : "already submitted ") << resp.job().id() << " ("
                << resp.job().name() << ", " << resp.job().gpus() << " rank(s), "
                << StateName(resp.job().state()) << ")\n";
    }
    if (submit_follow) {
      rc = FollowJob(c, resp.job().id(), submit_timeout);
    } else if (submit_wait) {
      rc = WaitForJob(c, resp.job().id(), submit_timeout, g.json());
    }
  });

  // ls
  auto* ls = app.add_subcommand("ls", "list jobs (newest first)");
  ls->alias("list");
  std::vector<std::string> ls_states;
  int ls_limit = 50;
  ls->add_option("--state", ls_states, "only jobs in these states (repeatable)");
  ls->add_option("--limit", ls_limit, "at most N jobs")->capture_default_str();
  ls->callback([&] {
    Client c = client();
    adctl::v1::ListJobsRequest req;
    for (const auto& s : ls_states) {
      adctl::v1::JobState state;
      std::string upper = s;
      for (auto& ch : upper) ch = static_cast<char>(toupper(ch));
      if (!adctl::v1::JobState_Parse("JOB_STATE_" + upper, &state)) {
        std::cerr << "adctl: --state " << s << ": unknown state\n";
        rc = kExitUsage;
        return;
      }
      req.add_states(state);
    }
    req.set_page_size(ls_limit);
    adctl::v1::ListJobsResponse resp;
    if ((rc = c.Call(&adctl::v1::JobService::Stub::ListJobs, req, &resp)) != 0) return;
    if (PrintedAsJson(g, resp)) return;
    Table t({"ID", "NAME", "STATE", "PROGRESS", "LOSS", "RESTARTS", "GPUS", "AGE", "MESSAGE"});
    const double now = Now();
    for (const auto& j : resp.jobs()) {
      char loss[32] = "-";
      if (j.progress().step() > 0) snprintf(loss, sizeof(loss), "%.4f", j.progress().loss());
      t.Add({j.id(), j.name(), StateName(j.state()), FormatProgress(j.progress()), loss,
             std::to_string(j.restarts()) + "/" + std::to_string(j.max_restarts()),
             std::to_string(j.gpus()), FormatDuration(now - j.submitted_at()),
             j.state() == adctl::v1::JOB_STATE_QUEUED && !j.wait_reason().empty() ? j.wait_reason()
                                                                                  : j.message()});
    }
    std::cout << t.ToString();
  });

  // describe
  auto* describe =
      app.add_subcommand("describe", "show one job: state, why it waits, ranks, events");
  describe->alias("show");
  std::string job_id;
  describe->add_option("JOB", job_id, "job id")->required();
  describe->callback([&] {
    Client c = client();
    adctl::v1::GetJobRequest req;
    req.set_job_id(job_id);
    adctl::v1::Job job;
    if ((rc = c.Call(&adctl::v1::JobService::Stub::GetJob, req, &job)) != 0) return;
    if (PrintedAsJson(g, job)) return;
    const double now = Now();
    std::cout << "Job:        " << job.id() << " (" << job.name() << ")\n"
              << "State:      " << StateName(job.state()) << "\n";
    if (!job.message().empty()) std::cout << "Message:    " << job.message() << "\n";
    if (job.state() == adctl::v1::JOB_STATE_QUEUED) {
      std::cout << "Waiting:    "
                << (job.wait_reason().empty() ? "next scheduling pass" : job.wait_reason()) << "\n";
    }
    std::cout << "Progress:   " << FormatProgress(job.progress());
    if (job.progress().step() > 0) {
      char buf[96];
      snprintf(buf, sizeof(buf), "  loss %.4f  %.2f clips/s  %.3f s/step", job.progress().loss(),
               job.progress().clips_per_second(), job.progress().step_seconds());
      std::cout << buf;
    }
    std::cout << "\n"
              << "Checkpoint: step " << job.progress().last_checkpoint_step() << "\n"
              << "Ranks:      " << job.gpus() << "  priority " << job.priority() << "\n"
              << "Attempt:    " << job.attempt() << "  restarts " << job.restarts() << "/"
              << job.max_restarts() << "\n"
              << "Submitted:  " << FormatDuration(now - job.submitted_at()) << " ago\n"
              << "Directory:  " << job.job_dir() << "\n";
    if (job.ranks_size() > 0) {
      Table t({"RANK", "DEVICE", "PID", "ALIVE", "EXIT", "HEARTBEAT"});
      for (const auto& r : job.ranks()) {
        std::string exit = r.alive()         ? "-"
                           : r.exit_signal() ? "signal " + std::to_string(r.exit_signal())
                                             : std::to_string(r.exit_code());
        t.Add({std::to_string(r.rank()), r.device(), std::to_string(r.pid()),
               r.alive() ? "yes" : "no", exit,
               r.last_heartbeat() > 0 ? FormatDuration(now - r.last_heartbeat()) + " ago" : "-"});
      }
      std::cout << "\n" << t.ToString();
    }
    adctl::v1::ListEventsRequest ereq;
    ereq.set_job_id(job_id);
    adctl::v1::ListEventsResponse events;
    auto ectx = c.Context();
    if (c.stub().ListEvents(ectx.get(), ereq, &events).ok()) {
      std::cout << "\nEvents:\n";
      int start = std::max(0, events.events_size() - 15);
      for (int i = start; i < events.events_size(); ++i) {
        const auto& e = events.events(i);
        std::cout << "  " << TimeOfDay(e.time()) << "  " << e.message() << "\n";
      }
    }
  });

  // logs
  auto* logs = app.add_subcommand("logs", "print a rank's log (stdout+stderr of adworker)");
  bool logs_follow = false;
  int logs_rank = 0, logs_attempt = 0;
  int64_t logs_tail = 0;
  logs->add_option("JOB", job_id, "job id")->required();
  logs->add_flag("-f,--follow", logs_follow, "keep printing until the job ends");
  logs->add_option("--rank", logs_rank, "rank")->capture_default_str();
  logs->add_option("--attempt", logs_attempt, "attempt (default: the latest, then later ones)");
  logs->add_option("--tail", logs_tail, "start this many bytes before the end");
  logs->callback([&] {
    Client c = client();
    adctl::v1::StreamLogsRequest req;
    req.set_job_id(job_id);
    req.set_rank(logs_rank);
    req.set_attempt(logs_attempt);
    req.set_follow(logs_follow);
    req.set_tail_bytes(logs_tail);
    auto ctx = c.Context(0);
    auto reader = c.stub().StreamLogs(ctx.get(), req);
    adctl::v1::LogChunk chunk;
    while (reader->Read(&chunk)) std::cout << chunk.data() << std::flush;
    grpc::Status st = reader->Finish();
    if (!st.ok()) rc = ReportError(st, c.server());
  });

  // watch
  auto* watch =
      app.add_subcommand("watch", "live progress until the job ends; exit code by outcome");
  double watch_timeout = 0;
  watch->add_option("JOB", job_id, "job id")->required();
  watch->add_option("--timeout", watch_timeout, "give up after S seconds (exit 4)");
  watch->callback([&] {
    Client c = client();
    rc = FollowJob(c, job_id, watch_timeout);
  });

  // cancel / pause / resume
  auto* cancel = app.add_subcommand("cancel", "stop a job for good (SIGTERM, grace, SIGKILL)");
  bool force = false;
  std::optional<double> grace;
  cancel->add_option("JOB", job_id, "job id")->required();
  cancel->add_flag("--force", force, "SIGKILL now");
  cancel->add_option("--grace", grace, "seconds between SIGTERM and SIGKILL (default: the spec's)");
  auto print_job = [&](const adctl::v1::Job& job) {
    if (g.json()) {
      std::cout << ToJson(job) << "\n";
    } else {
      std::cout << job.id() << " " << StateName(job.state())
                << (job.message().empty() ? "" : ": " + job.message()) << "\n";
    }
  };
  cancel->callback([&] {
    Client c = client();
    adctl::v1::CancelJobRequest req;
    req.set_job_id(job_id);
    req.set_force(force);
    if (grace) req.set_grace_seconds(*grace);
    adctl::v1::Job job;
    if ((rc = c.Call(&adctl::v1::JobService::Stub::CancelJob, req, &job)) != 0) return;
    print_job(job);
  });
  auto* pause = app.add_subcommand("pause", "checkpoint and stop a job, keeping it resumable");
  pause->add_option("JOB", job_id, "job id")->required();
  pause->add_option("--grace", grace, "seconds to wait for the checkpoint before SIGKILL");
  pause->callback([&] {
    Client c = client();
    adctl::v1::PauseJobRequest req;
    req.set_job_id(job_id);
    if (grace) req.set_grace_seconds(*grace);
    adctl::v1::Job job;
    if ((rc = c.Call(&adctl::v1::JobService::Stub::PauseJob, req, &job)) != 0) return;
    print_job(job);
  });
  auto* resume = app.add_subcommand(
      "resume", "continue a paused job from its newest checkpoint (optionally on N ranks)");
  std::optional<int> resume_gpus;
  resume->add_option("JOB", job_id, "job id")->required();
  resume->add_option("--gpus", resume_gpus,
                     "run on N ranks; train.grad_accum is recomputed to keep the global batch");
  resume->callback([&] {
    Client c = client();
    adctl::v1::ResumeJobRequest req;
    req.set_job_id(job_id);
    if (resume_gpus) req.set_gpus(*resume_gpus);
    adctl::v1::Job job;
    if ((rc = c.Call(&adctl::v1::JobService::Stub::ResumeJob, req, &job)) != 0) return;
    print_job(job);
  });

  // wait
  auto* wait = app.add_subcommand(
      "wait", "wait until a job ends: exit 0 SUCCEEDED, 1 FAILED, 3 CANCELLED, 4 timeout");
  double wait_timeout = 0;
  wait->add_option("JOB", job_id, "job id")->required();
  wait->add_option("--timeout", wait_timeout, "give up after S seconds (exit 4)");
  wait->callback([&] {
    Client c = client();
    rc = WaitForJob(c, job_id, wait_timeout, g.json());
  });

  // ckpt ls
  auto* ckpt = app.add_subcommand("ckpt", "checkpoints");
  ckpt->require_subcommand(1);
  auto* ckpt_ls = ckpt->add_subcommand("ls", "list a job's checkpoints");
  ckpt_ls->add_option("JOB", job_id, "job id")->required();
  ckpt_ls->callback([&] {
    Client c = client();
    adctl::v1::ListCheckpointsRequest req;
    req.set_job_id(job_id);
    adctl::v1::ListCheckpointsResponse resp;
    if ((rc = c.Call(&adctl::v1::JobService::Stub::ListCheckpoints, req, &resp)) != 0) return;
    if (PrintedAsJson(g, resp)) return;
    Table t({"STEP", "SIZE", "ON DISK", "ATTEMPT", "PATH"});
    for (const auto& ck : resp.checkpoints()) {
      t.Add({std::to_string(ck.step()), FormatBytes(ck.size_bytes()), ck.on_disk() ? "yes" : "no",
             ck.attempt() ? std::to_string(ck.attempt()) : "-", ck.path()});
    }
    std::cout << t.ToString();
  });

  // events
  auto* events = app.add_subcommand("events", "a job's event history");
  events->add_option("JOB", job_id, "job id")->required();
  events->callback([&] {
    Client c = client();
    adctl::v1::ListEventsRequest req;
    req.set_job_id(job_id);
    adctl::v1::ListEventsResponse resp;
    if ((rc = c.Call(&adctl::v1::JobService::Stub::ListEvents, req, &resp)) != 0) return;
    if (PrintedAsJson(g, resp)) return;
    Table t({"TIME", "ATTEMPT", "KIND", "LEVEL", "MESSAGE"});
    for (const auto& e : resp.events()) {
      t.Add({TimeOfDay(e.time()), std::to_string(e.attempt()), e.kind(), e.level(), e.message()});
    }
    std::cout << t.ToString();
  });

  // gpus
  auto* gpus =
      app.add_subcommand("gpus", "the coordinator's GPUs (or CPU slots) and who holds them");
  gpus->callback([&] {
    Client c = client();
    adctl::v1::ListDevicesRequest req;
    adctl::v1::ListDevicesResponse resp;
    if ((rc = c.Call(&adctl::v1::JobService::Stub::ListDevices, req, &resp)) != 0) return;
    if (PrintedAsJson(g, resp)) return;
    Table t({"DEVICE", "KIND", "MODEL", "MEMORY", "JOB"});
    for (const auto& d : resp.devices()) {
      t.Add({d.name(), d.kind(), d.model(),
             d.memory_total_bytes()
                 ? FormatBytes(d.memory_used_bytes()) + " / " + FormatBytes(d.memory_total_bytes())
                 : "-",
             d.job_id().empty() ? "-" : d.job_id()});
    }
    std::cout << t.ToString();
  });

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return code == 0 ? 0 : kExitUsage;
  }
  return rc;
}

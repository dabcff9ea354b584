// adctl: the command line of the adctl training-job service (thin over adctl.v1.JobService).
//
// Exit codes: 0 ok / job SUCCEEDED, 1 job FAILED or server error, 2 usage or validation error
// (also unknown job ids, TLS set up wrong), 3 job CANCELLED, 4 --timeout passed, 5 adctld
// unreachable, 6 `wait`: the job is PAUSED.
#include <grpc/support/log.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <thread>

#include "cli/client.h"
#include "cli/diff.h"
#include "cli/render.h"
#include "cli/select.h"
#include "cli/sweep.h"
#include "common/job_spec.h"
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
  if (newest.empty()) return job.job_dir() + "/checkpoints";
  return std::filesystem::path(newest).parent_path().string();
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

// Polls GetJob until a terminal state, then prints the outcome (`json`: the final job as JSON);
// tolerates adctld restarts for up to 60 s.
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
          std::cout << ToJson(job) << "\n";
        } else {
          PrintOutcome(client, job);
        }
        return ExitCodeFor(job.state());
      }
      if (job.state() == v1::JOB_STATE_PAUSED) {
        // Nothing happens to a paused job until someone resumes it: a pipeline must not hang.
        if (json) {
          std::cout << ToJson(job) << "\n";
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
      if (json && st.ok()) std::cout << ToJson(job) << "\n";
      std::cerr << "adctl: timed out after " << FormatDuration(timeout_seconds) << " waiting for "
                << id << " (" << (st.ok() ? StateName(job.state()) : "unknown") << ")\n";
      return kExitTimeout;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }
}

// Streams WatchJob with a live progress line until the job ends (`json`: each update as one JSON
// line, the job snapshot, an event or a metric point, and nothing else on stdout); reconnects
// across adctld restarts (resuming after the last event seen).
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
        std::cout << ToJson(update, /*one_line=*/true) << "\n" << std::flush;
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

adctl::Result<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return adctl::NotFound(path + ": cannot read the job spec file");
  // Checked here, before the call: adctld would refuse it too, but a file larger than a gRPC
  // message never reaches the check that says why.
  const std::streamoff size = in.tellg();
  if (size > static_cast<std::streamoff>(adctl::kMaxSpecBytes)) {
    return adctl::InvalidArgument(path + ": " + std::to_string(size) + " bytes, more than the " +
                                  std::to_string(adctl::kMaxSpecBytes) + " a job spec may have");
  }
  in.seekg(0);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// --- One function per subcommand. Each returns the process exit code.

namespace v1 = adctl::v1;
using Stub = v1::JobService::Stub;

// The options of the subcommands that take them (filled by CLI11).
struct SubmitArgs {
  std::string spec_file, submission_id;
  std::vector<std::string> sets;
  std::vector<std::string> after;  // --after J[,K] (repeatable)
  bool after_any = false;
  std::vector<std::string> labels;    // --label k=v (repeatable)
  std::vector<std::string> sweeps;    // --sweep path=v1,v2 (repeatable: the cartesian product)
  std::vector<std::string> webhooks;  // --webhook URL (repeatable)
  std::optional<int> gpus, priority;
  bool wait = false, follow = false, dry_run = false;
  double timeout = 0;
};
struct ListArgs {
  std::vector<std::string> states;
  int limit = 50;
  bool all = false;
  std::vector<std::string> labels;  // --label k=v: only jobs with every one
  bool mine = false;                // only the jobs this token submitted
  std::string group;                // --group G: a sweep's jobs, with a summary
};
struct LogsArgs {
  bool follow = false;
  int rank = 0, attempt = 0;
  int64_t tail = 0;
};
struct StopArgs {  // cancel and pause
  bool force = false;
  std::optional<double> grace;
};

// A command whose answer is a job (cancel, pause, resume): one line, or JSON.
template <typename Request>
int CallAndPrintJob(Client& c, const Globals& g,
                    grpc::Status (Stub::*method)(grpc::ClientContext*, const Request&, v1::Job*),
                    const Request& req) {
  v1::Job job;
  if (int rc = c.Call(method, req, &job); rc != 0) return rc;
  if (PrintedAsJson(g, job)) return 0;
  std::cout << job.id() << " " << StateName(job.state())
            << (job.message().empty() ? "" : ": " + job.message()) << "\n";
  return 0;
}

// submit --sweep: one job per point of the product, all labelled group=G and path=value per
// swept field; with --submission-id S, job k's id is S/k, so the whole sweep is idempotent.
int SubmitSweep(Client& c, const Globals& g, const SubmitArgs& a,
                const v1::SubmitJobRequest& base) {
  if (a.wait || a.follow) {
    std::cerr << "adctl: --sweep submits several jobs: follow them with adctl ls --group G\n";
    return kExitUsage;
  }
  std::vector<SweepAxis> axes;
  for (const std::string& text : a.sweeps) {
    auto axis = ParseSweep(text);
    if (!axis.ok()) {
      std::cerr << "adctl: " << axis.status().message() << "\n";
      return kExitUsage;
    }
    axes.push_back(std::move(*axis));
  }
  auto points = SweepPoints(axes);
  if (!points.ok()) {
    std::cerr << "adctl: " << points.status().message() << "\n";
    return kExitUsage;
  }
  const std::string group = SweepGroup(a.submission_id);
  nlohmann::json out = {{"group", group}, {"jobs", nlohmann::json::array()}};
  int submitted = 0;
  for (size_t k = 0; k < points->size(); ++k) {
    v1::SubmitJobRequest req = base;
    std::string described;
    for (const std::string& o : (*points)[k]) {
      req.add_overrides(o);
      const size_t eq = o.find('=');
      (*req.mutable_labels())[o.substr(0, eq)] = o.substr(eq + 1);
      described += (described.empty() ? "" : ", ") + o;
    }
    (*req.mutable_labels())["group"] = group;
    if (!a.submission_id.empty()) req.set_submission_id(a.submission_id + "/" + std::to_string(k));
    v1::SubmitJobResponse resp;
    if (int rc = c.Call(&Stub::SubmitJob, req, &resp); rc != 0) {
      std::cerr << "adctl: the sweep stopped at job " << k + 1 << " of " << points->size() << " ("
                << described << "); " << submitted << " submitted in group " << group
                << " (adctl ls --group " << group << ")\n";
      return rc;
    }
    ++submitted;
    if (g.json()) {
      out["jobs"].push_back(nlohmann::json::parse(ToJson(resp.job())));
    } else {
      std::cout << (resp.created() ? "submitted " : "already submitted ") << resp.job().id() << " ("
                << described << ")\n";
    }
  }
  if (g.json()) {
    std::cout << out.dump() << "\n";
  } else {
    std::cout << "group " << group << ": " << submitted << " job(s); adctl ls --group " << group
              << "\n";
  }
  return 0;
}

int Submit(Client& c, const Globals& g, const SubmitArgs& a) {
  auto text = ReadFile(a.spec_file);
  if (!text.ok()) {
    std::cerr << "adctl: " << text.status().message() << "\n";
    return kExitUsage;
  }
  v1::SubmitJobRequest req;
  req.set_spec_yaml(text.value());
  for (const auto& s : a.sets) req.add_overrides(s);
  if (a.gpus) req.set_gpus(*a.gpus);
  if (a.priority) req.set_priority(*a.priority);
  req.set_submission_id(a.submission_id);
  for (const std::string& ids : a.after) {
    std::stringstream list(ids);
    std::string id;
    while (std::getline(list, id, ',')) {
      if (!id.empty()) req.add_after(id);
    }
  }
  req.set_after_any(a.after_any);
  for (const std::string& url : a.webhooks) req.add_webhooks(url);
  if (!ParseLabels(a.labels, req.mutable_labels())) return kExitUsage;
  if (a.dry_run) {
    if (!a.sweeps.empty() || a.wait || a.follow) {
      std::cerr << "adctl: --dry-run submits nothing: not with --sweep, --wait or --follow\n";
      return kExitUsage;
    }
    req.set_dry_run(true);
    v1::SubmitJobResponse resp;
    if (int rc = c.Call(&Stub::SubmitJob, req, &resp); rc != 0) return rc;
    if (!PrintedAsJson(g, resp.plan())) std::cout << RenderPlan(resp.plan());
    return 0;
  }
  if (!a.sweeps.empty()) return SubmitSweep(c, g, a, req);
  v1::SubmitJobResponse resp;
  if (int rc = c.Call(&Stub::SubmitJob, req, &resp); rc != 0) return rc;
  // With -o json and --wait / --follow, stdout is the outcome only (the final job, or the
  // update lines whose first one is the job as submitted).
  if (g.json() && (a.wait || a.follow)) {
    if (!resp.created()) std::cerr << "already submitted " << resp.job().id() << "\n";
  } else if (!PrintedAsJson(g, resp)) {
    std::cout << (resp.created() ? "submitted " : "already submitted ") << resp.job().id() << " ("
              << resp.job().name() << ", " << resp.job().gpus() << " rank(s), "
              << StateName(resp.job().state()) << ")\n";
  }
  if (a.follow) return FollowJob(c, resp.job().id(), a.timeout, g.json());
  if (a.wait) return WaitForJob(c, resp.job().id(), a.timeout, g.json());
  return 0;
}

int List(Client& c, const Globals& g, const ListArgs& a) {
  v1::ListJobsRequest req;
  for (const auto& s : a.states) {
    v1::JobState state;
    std::string upper = s;
    for (auto& ch : upper) ch = static_cast<char>(toupper(ch));
    // RUNNING and the API's JOB_STATE_RUNNING (what -o json prints) are both accepted.
    if (upper.rfind("JOB_STATE_", 0) != 0) upper = "JOB_STATE_" + upper;
    if (upper == "JOB_STATE_UNSPECIFIED" || !v1::JobState_Parse(upper, &state)) {
      std::cerr << "adctl: --state " << s << ": unknown state\n";
      return kExitUsage;
    }
    req.add_states(state);
  }
  if (a.limit < 1) {
    std::cerr << "adctl: --limit " << a.limit << ": must be at least 1 (every job: --all)\n";
    return kExitUsage;
  }
  if (!ParseLabels(a.labels, req.mutable_labels())) return kExitUsage;
  req.set_mine(a.mine);
  if (!a.group.empty()) (*req.mutable_labels())["group"] = a.group;
  const bool all = a.all || !a.group.empty();  // a sweep is at most 256 jobs: all of them
  // Page by page (adctld sends at most 1000 jobs a page) up to --limit, or to the end (--all).
  constexpr int kMaxPage = 1000;
  v1::ListJobsResponse resp;
  do {
    const int wanted = all ? kMaxPage : std::min(kMaxPage, a.limit - resp.jobs_size());
    req.set_page_size(wanted);
    v1::ListJobsResponse page;
    if (int rc = c.Call(&Stub::ListJobs, req, &page); rc != 0) return rc;
    for (auto& j : *page.mutable_jobs()) *resp.add_jobs() = std::move(j);
    resp.set_next_page_token(page.next_page_token());
    req.set_page_token(page.next_page_token());
  } while (!resp.next_page_token().empty() && (all || resp.jobs_size() < a.limit));
  // More than --limit: say how many more (counted page by page) and how to see them.
  std::string more;
  if (!resp.next_page_token().empty()) {
    int64_t rest = 0;
    v1::ListJobsRequest count = req;
    count.set_page_size(kMaxPage);
    do {
      v1::ListJobsResponse page;
      if (int rc = c.Call(&Stub::ListJobs, count, &page); rc != 0) return rc;
      rest += page.jobs_size();
      count.set_page_token(page.next_page_token());
    } while (!count.page_token().empty());
    more = std::to_string(resp.jobs_size()) + " of " + std::to_string(resp.jobs_size() + rest) +
           " jobs shown, " + std::to_string(rest) + " more: adctl ls --all, or --limit N";
  }
  if (g.json()) {
    std::cout << ToJson(resp) << "\n";
    if (!more.empty()) std::cerr << "adctl: " << more << "\n";  // stdout stays JSON
    return 0;
  }
  Table t({"ID", "NAME", "STATE", "PROGRESS", "LOSS", "RESTARTS", "GPUS", "AGE", "MESSAGE"});
  const double now = Now();
  for (const auto& j : resp.jobs()) {
    char loss[32] = "-";
    if (j.progress().step() > 0 && Trains(j)) {
      snprintf(loss, sizeof(loss), "%.4f", j.progress().loss());
    }
    t.Add({j.id(), j.name(), StateName(j.state()), FormatProgress(j.progress()), loss,
           std::to_string(j.restarts()) + "/" + std::to_string(j.max_restarts()),
           std::to_string(j.gpus()), FormatDuration(now - j.submitted_at()),
           j.state() == v1::JOB_STATE_QUEUED && !j.wait_reason().empty() ? j.wait_reason()
                                                                         : j.message()});
  }
  std::cout << t.ToString();
  if (!more.empty()) std::cout << "(" << more << ")\n";
  if (!a.group.empty()) {
    std::cout << GroupSummary(a.group, {resp.jobs().begin(), resp.jobs().end()}) << "\n";
  }
  return 0;
}

int Describe(Client& c, const Globals& g, const std::string& job_id) {
  v1::GetJobRequest req;
  req.set_job_id(job_id);
  v1::Job job;
  if (int rc = c.Call(&Stub::GetJob, req, &job); rc != 0) return rc;
  if (PrintedAsJson(g, job)) return 0;
  const double now = Now();
  std::cout << "Job:        " << job.id() << " (" << job.name() << ")\n"
            << "State:      " << StateName(job.state()) << "\n";
  if (!job.trains().empty()) std::cout << "Trains:     " << job.trains() << "\n";
  if (!job.message().empty()) std::cout << "Message:    " << job.message() << "\n";
  if (!job.preempted_by().empty()) {
    std::cout << "Preempted:  by " << job.preempted_by() << " (resumes from its checkpoint)\n";
  }
  if (job.state() == v1::JOB_STATE_QUEUED) {
    std::cout << "Waiting:    "
              << (job.wait_reason().empty() ? "next scheduling pass" : job.wait_reason()) << "\n";
  }
  const bool preprocess = job.progress().has_preprocess();
  if (preprocess) {
    std::cout << "Progress:   " << PreprocessLine(job.progress().preprocess(), true);
  } else {
    std::cout << "Progress:   " << FormatProgress(job.progress());
  }
  if (job.progress().step() > 0 && !preprocess) {
    char buf[96];
    snprintf(buf, sizeof(buf), "  loss %.4f  %.2f clips/s  %.3f s/step", job.progress().loss(),
             job.progress().clips_per_second(), job.progress().step_seconds());
    std::cout << buf;
    if (job.progress().mfu_ratio() > 0) {
      snprintf(buf, sizeof(buf), "  MFU %.1f %%", 100 * job.progress().mfu_ratio());
      std::cout << buf;
    }
  }
  std::cout << "\n";
  if (job.progress().eval_step() > 0) {
    char buf[96];
    snprintf(buf, sizeof(buf), "Eval loss:  %.5f at step %lld (held-out clips)\n",
             job.progress().eval_loss(), static_cast<long long>(job.progress().eval_step()));
    std::cout << buf;
  }
  if (!preprocess) {  // a preprocess job writes a latent cache, not checkpoints
    std::cout << "Checkpoint: step " << job.progress().last_checkpoint_step() << "\n";
  }
  if (job.progress().eta_seconds() > 0) {
    std::cout << "ETA:        " << FormatDuration(job.progress().eta_seconds())
              << (job.progress().validation_seconds() > 0
                      ? " (validations included, " +
                            FormatSeconds(job.progress().validation_seconds()) + " each)"
                      : std::string())
              << "\n";
  }
  std::cout << "Ranks:      " << job.gpus() << "  priority " << job.priority()
            << (job.preemptible() ? "  preemptible" : "") << "\n"
            << "Attempt:    " << job.attempt() << "  restarts " << job.restarts() << "/"
            << job.max_restarts() << "\n"
            << "Submitted:  " << FormatDuration(now - job.submitted_at()) << " ago"
            << (job.submitted_by().empty() ? "" : " by " + job.submitted_by()) << "\n"
            << "Directory:  " << job.job_dir() << "\n";
  if (!job.labels().empty()) std::cout << "Labels:     " << LabelsText(job.labels()) << "\n";
  if (job.after_size() > 0) {
    std::string after;
    for (const std::string& id : job.after()) after += (after.empty() ? "" : ", ") + id;
    std::cout << "After:      " << after
              << (job.after_any() ? "  (any end)" : "  (each must succeed)") << "\n";
  }
  if (job.launcher() == "slurm") {
    const v1::ClusterJob& cj = job.cluster_job();
    std::cout << "Slurm job:  " << (cj.id().empty() ? "none yet" : cj.id());
    if (!cj.state().empty()) std::cout << "  " << cj.state();
    if (!cj.nodes().empty()) std::cout << "  nodes " << cj.nodes();
    if (!cj.reason().empty() && cj.reason() != "None") std::cout << "  reason " << cj.reason();
    std::cout << "\n";
  }
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
  v1::ListEventsRequest ereq;
  ereq.set_job_id(job_id);
  v1::ListEventsResponse events;
  auto ectx = c.Context();
  if (c.stub().ListEvents(ectx.get(), ereq, &events).ok()) {
    std::cout << "\nEvents:\n";
    int first = std::max(0, events.events_size() - 15);
    for (int i = first; i < events.events_size(); ++i) {
      const auto& e = events.events(i);
      std::cout << "  " << TimeOfDay(e.time()) << "  " << e.message() << "\n";
    }
  }
  return 0;
}

// Prints a rank's log; with -f follows it to the job's end, reconnecting across adctld restarts
// at the byte it reached (as wait, watch and --follow ride them out).
int Logs(Client& c, const std::string& job_id, const LogsArgs& a) {
  v1::StreamLogsRequest req;
  req.set_job_id(job_id);
  req.set_rank(a.rank);
  req.set_attempt(a.attempt);
  req.set_follow(a.follow);
  req.set_tail_bytes(a.tail);
  double unreachable_since = 0;
  bool ever_connected = false;
  while (true) {
    auto ctx = c.Context(0);
    auto reader = c.stub().StreamLogs(ctx.get(), req);
    v1::LogChunk chunk;
    while (reader->Read(&chunk)) {
      ever_connected = true;
      unreachable_since = 0;
      std::cout << chunk.data() << std::flush;
      if (chunk.next_offset() > 0) {
        req.set_resume_attempt(chunk.attempt());
        req.set_resume_offset(chunk.next_offset());
      }
    }
    grpc::Status st = reader->Finish();
    if (st.ok()) return 0;
    const bool gone = st.error_code() == grpc::StatusCode::UNAVAILABLE ||
                      st.error_code() == grpc::StatusCode::CANCELLED;
    if (!a.follow || !ever_connected || !gone) return c.ReportError(st);
    // adctld went away mid-stream: most likely a restart; keep trying a while.
    if (unreachable_since == 0) unreachable_since = Now();
    if (Now() - unreachable_since > 60) return c.ReportError(st);
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
}

int Cancel(Client& c, const Globals& g, const std::string& job_id, const StopArgs& a) {
  v1::CancelJobRequest req;
  req.set_job_id(job_id);
  req.set_force(a.force);
  if (a.grace) req.set_grace_seconds(*a.grace);
  return CallAndPrintJob(c, g, &Stub::CancelJob, req);
}

int Pause(Client& c, const Globals& g, const std::string& job_id, const StopArgs& a) {
  v1::PauseJobRequest req;
  req.set_job_id(job_id);
  if (a.grace) req.set_grace_seconds(*a.grace);
  return CallAndPrintJob(c, g, &Stub::PauseJob, req);
}

int Resume(Client& c, const Globals& g, const std::string& job_id, std::optional<int> gpus) {
  v1::ResumeJobRequest req;
  req.set_job_id(job_id);
  if (gpus) req.set_gpus(*gpus);
  return CallAndPrintJob(c, g, &Stub::ResumeJob, req);
}

int SetPriority(Client& c, const Globals& g, const std::string& job_id, int priority) {
  v1::SetJobPriorityRequest req;
  req.set_job_id(job_id);
  req.set_priority(priority);
  return CallAndPrintJob(c, g, &Stub::SetJobPriority, req);
}

int Checkpoints(Client& c, const Globals& g, const std::string& job_id) {
  v1::ListCheckpointsRequest req;
  req.set_job_id(job_id);
  v1::ListCheckpointsResponse resp;
  if (int rc = c.Call(&Stub::ListCheckpoints, req, &resp); rc != 0) return rc;
  if (PrintedAsJson(g, resp)) return 0;
  // SAVE: the background write; STALL: the training time it took (both as rank 0 reported them).
  Table t({"STEP", "SIZE", "ON DISK", "PINNED", "ATTEMPT", "SAVE", "STALL", "PATH"});
  auto seconds = [](double s) { return s > 0 ? FormatSeconds(s) : std::string("-"); };
  for (const auto& ck : resp.checkpoints()) {
    t.Add({std::to_string(ck.step()), FormatBytes(ck.size_bytes()), ck.on_disk() ? "yes" : "no",
           ck.pinned() ? "yes" : "-", ck.attempt() ? std::to_string(ck.attempt()) : "-",
           seconds(ck.save_seconds()), seconds(ck.stall_seconds()), ck.path()});
  }
  std::cout << t.ToString();
  return 0;
}

// adctl ckpt pin|unpin JOB STEP.
int PinCheckpoint(Client& c, const Globals& g, const std::string& job_id, int64_t step, bool pin) {
  v1::PinCheckpointRequest req;
  req.set_job_id(job_id);
  req.set_step(step);
  req.set_pin(pin);
  v1::PinCheckpointResponse resp;
  if (int rc = c.Call(&Stub::PinCheckpoint, req, &resp); rc != 0) return rc;
  if (PrintedAsJson(g, resp)) return 0;
  std::string steps;
  for (int64_t s : resp.pinned_steps()) steps += (steps.empty() ? "" : ", ") + std::to_string(s);
  std::cout << (pin ? "pinned" : "unpinned") << " step " << step << " of " << job_id
            << "; pinned steps: " << (steps.empty() ? "none" : steps) << "\n";
  return 0;
}

int Events(Client& c, const Globals& g, const std::string& job_id) {
  v1::ListEventsRequest req;
  req.set_job_id(job_id);
  v1::ListEventsResponse resp;
  if (int rc = c.Call(&Stub::ListEvents, req, &resp); rc != 0) return rc;
  if (PrintedAsJson(g, resp)) return 0;
  Table t({"TIME", "ATTEMPT", "KIND", "LEVEL", "MESSAGE"});
  for (const auto& e : resp.events()) {
    t.Add({TimeOfDay(e.time()), std::to_string(e.attempt()), e.kind(), e.level(), e.message()});
  }
  std::cout << t.ToString();
  return 0;
}

// Downloads the artifact `relative` of a job to `dest` (through `dest`.part, renamed when the
// whole file arrived). Returns 0, or an exit code after printing why.
int Download(Client& c, const std::string& job_id, const std::string& relative,
             const std::filesystem::path& dest, int64_t* bytes) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (dest.has_parent_path()) fs::create_directories(dest.parent_path(), ec);
  const fs::path part = dest.string() + ".part";
  std::ofstream out(part, std::ios::binary | std::ios::trunc);
  if (!out) {
    std::cerr << "adctl: cannot write " << part.string() << "\n";
    return kExitFailed;
  }
  v1::ReadArtifactRequest req;
  req.set_job_id(job_id);
  req.set_path(relative);
  auto ctx = c.Context(0);
  auto reader = c.stub().ReadArtifact(ctx.get(), req);
  v1::ArtifactChunk chunk;
  int64_t expected = -1, got = 0;
  while (reader->Read(&chunk)) {
    if (expected < 0) expected = chunk.size_bytes();
    out.write(chunk.data().data(), static_cast<std::streamsize>(chunk.data().size()));
    got += static_cast<int64_t>(chunk.data().size());
  }
  grpc::Status st = reader->Finish();
  out.close();
  if (!st.ok() || !out || got != expected) {
    fs::remove(part, ec);
    if (!st.ok()) return c.ReportError(st);
    std::cerr << "adctl: " << relative << ": received " << got << " of " << expected << " bytes\n";
    return kExitFailed;
  }
  fs::rename(part, dest, ec);
  if (ec) {
    fs::remove(part, ec);
    std::cerr << "adctl: cannot write " << dest.string() << ": " << ec.message() << "\n";
    return kExitFailed;
  }
  *bytes += got;
  return 0;
}

struct SamplesArgs {
  int64_t step = 0;
  std::string download;  // a folder; "" lists only
};

int Samples(Client& c, const Globals& g, const std::string& job_id, const SamplesArgs& a) {
  v1::ListSamplesRequest req;
  req.set_job_id(job_id);
  req.set_step(a.step);
  v1::ListSamplesResponse resp;
  if (int rc = c.Call(&Stub::ListSamples, req, &resp); rc != 0) return rc;
  if (!a.download.empty()) {
    int64_t bytes = 0;
    int files = 0;
    for (const auto& s : resp.samples()) {
      for (const std::string& rel : {s.mp4(), s.gif()}) {
        // samples/step-N/x.mp4 → <folder>/step-N/x.mp4
        const std::string inside = rel.substr(rel.find('/') + 1);
        if (int rc = Download(c, job_id, rel, std::filesystem::path(a.download) / inside, &bytes);
            rc != 0) {
          return rc;
        }
        ++files;
      }
    }
    if (!g.json()) {
      std::cout << "downloaded " << files << " files (" << FormatBytes(bytes) << ") to "
                << a.download << "\n";
    }
  }
  if (PrintedAsJson(g, resp)) return 0;
  if (!a.download.empty()) return 0;
  Table t({"STEP", "SAMPLE", "PROMPT", "MP4", "GIF", "ON DISK"});
  for (const auto& s : resp.samples()) {
    t.Add({std::to_string(s.step()), s.index() < 0 ? "grid" : std::to_string(s.index()), s.prompt(),
           s.mp4(), s.gif(), s.on_disk() ? "yes" : "no"});
  }
  std::cout << t.ToString();
  return 0;
}

struct ExportArgs {
  int64_t step = 0;
  std::string format;
  std::string out;
  std::string weights = "raw";
};

int Export(Client& c, const Globals& g, const std::string& job_id, const ExportArgs& a) {
  v1::ExportMotionModulesRequest req;
  req.set_job_id(job_id);
  req.set_step(a.step);
  req.set_format(a.format);
  req.set_weights(a.weights);
  v1::ExportMotionModulesResponse resp;
  // Verifying a large checkpoint and converting it takes a while.
  if (int rc = c.Call(&Stub::ExportMotionModules, req, &resp, 1800); rc != 0) return rc;
  namespace fs = std::filesystem;
  int64_t bytes = 0;
  std::vector<fs::path> written;
  for (const auto& f : resp.files()) {
    // A single file lands at --out, or inside it when --out is a folder (existing, or written
    // with a trailing '/'); a folder's files keep their place below --out.
    fs::path dest = a.out;
    std::error_code ec;
    if (f.path() != resp.path()) {
      dest /= f.path().substr(resp.path().size() + 1);
    } else if (fs::is_directory(dest, ec) || a.out.back() == '/') {
      dest /= fs::path(f.path()).filename();
    }
    if (int rc = Download(c, job_id, f.path(), dest, &bytes); rc != 0) {
      for (const fs::path& p : written) fs::remove(p, ec);  // a failed export leaves nothing
      return rc;
    }
    written.push_back(dest);
  }
  if (PrintedAsJson(g, resp)) return 0;
  std::cout << "exported step " << resp.step() << (a.weights == "ema" ? " (EMA weights)" : "")
            << " as " << resp.format() << " (" << resp.motion_norm() << " GroupNorm, "
            << FormatBytes(bytes) << ") to " << (written.size() == 1 ? written[0].string() : a.out)
            << "\n";
  return 0;
}

int Exports(Client& c, const Globals& g, const std::string& job_id) {
  v1::ListExportsRequest req;
  req.set_job_id(job_id);
  v1::ListExportsResponse resp;
  if (int rc = c.Call(&Stub::ListExports, req, &resp); rc != 0) return rc;
  if (PrintedAsJson(g, resp)) return 0;
  Table t({"STEP", "WEIGHTS", "FORMAT", "SIZE", "FILES", "PATH"});
  for (const auto& e : resp.exports()) {
    int64_t bytes = 0;
    for (const auto& f : e.files()) bytes += f.size_bytes();
    t.Add({std::to_string(e.step()), e.weights(), e.format(), FormatBytes(bytes),
           std::to_string(e.files_size()), e.path()});
  }
  std::cout << t.ToString();
  return 0;
}

int Devices(Client& c, const Globals& g) {
  v1::ListDevicesResponse resp;
  if (int rc = c.Call(&Stub::ListDevices, v1::ListDevicesRequest(), &resp); rc != 0) return rc;
  if (PrintedAsJson(g, resp)) return 0;
  Table t({"DEVICE", "KIND", "MODEL", "MEMORY", "JOB"});
  for (const auto& d : resp.devices()) {
    t.Add({d.name(), d.kind(), d.model(),
           d.memory_total_bytes()
               ? FormatBytes(d.memory_used_bytes()) + " / " + FormatBytes(d.memory_total_bytes())
               : "-",
           d.job_id().empty() ? "-" : d.job_id()});
  }
  std::cout << t.ToString();
  return 0;
}

}  // namespace
}  // namespace adctl::cli

using namespace adctl::cli;  // NOLINT: the entry point only

int main(int argc, char** argv) {
  // gRPC's own log lines (a failed TLS handshake prints one) are not for adctl's users: adctl
  // says what went wrong itself. With GRPC_VERBOSITY set they stay.
  if (getenv("GRPC_VERBOSITY") == nullptr) gpr_set_log_function([](gpr_log_func_args*) {});
  CLI::App app{
      "adctl — submit and control AnimateDiff training jobs on an adctld coordinator.\n"
      "Exit codes: 0 ok/SUCCEEDED, 1 FAILED or server error, 2 usage or validation error,\n"
      "3 CANCELLED, 4 timed out, 5 adctld unreachable, 6 (wait) the job is PAUSED."};
  app.require_subcommand(1);
  Globals g;
  app.add_option("--server", g.server,
                 "adctld address host:port, or unix:PATH of a tokenless adctld's socket (env "
                 "ADCTL_SERVER, config `server:`; default: $ADCTL_DATA_DIR/adctld.sock, else "
                 "./adctl-data/adctld.sock when it exists, else localhost:50051); token from env "
                 "ADCTL_TOKEN or `token:` in ~/.config/adctl/config.yaml");
  app.add_option("-o,--output", g.output, "output format")
      ->check(CLI::IsMember({"table", "json"}))
      ->capture_default_str();

  // Registration only: each callback runs its subcommand's function with a connected client.
  int rc = 0;
  auto run = [&](auto command) {
    return [&rc, &g, command] {
      Client c(ResolveConnection(g.server));
      if (!c.setup_error().empty()) {
        std::cerr << "adctl: " << c.setup_error() << "\n";
        rc = kExitUsage;
        return;
      }
      rc = command(c);
    };
  };
  std::string job_id;
  auto add_job_command = [&](const char* name, const char* help) {
    CLI::App* sub = app.add_subcommand(name, help);
    sub->add_option("JOB", job_id, "job id")->required();
    return sub;
  };

  SubmitArgs submit;
  auto* submit_cmd = app.add_subcommand("submit", "submit a job spec (YAML; docs/job-spec.md)");
  submit_cmd->add_option("FILE", submit.spec_file, "job spec file")->required();
  submit_cmd->add_option("--set", submit.sets,
                         "override a spec field: --set train.lr=3e-4 (repeatable)");
  submit_cmd->add_option("--gpus", submit.gpus,
                         "ranks (GPUs, or CPU slots); overrides resources.gpus");
  submit_cmd->add_option("--priority", submit.priority,
                         "higher runs first; overrides resources.priority");
  submit_cmd->add_option("--submission-id", submit.submission_id,
                         "idempotency key: resubmitting with the same id returns the same job");
  submit_cmd->add_option("--after", submit.after,
                         "start only after these jobs SUCCEEDED (J[,K...], repeatable; Slurm's "
                         "afterok): if one ends otherwise, this job FAILS without a rank");
  submit_cmd->add_flag("--after-any", submit.after_any,
                       "with --after: start after those jobs end, however they end");
  submit_cmd->add_option("--label", submit.labels,
                         "a label k=v (repeatable): ls, cancel, pause and resume select by it");
  submit_cmd->add_option("--sweep", submit.sweeps,
                         "path=v1,v2 (repeatable): one job per combination of the values, in a "
                         "group (adctl ls --group G)");
  submit_cmd
      ->add_option("--webhook", submit.webhooks,
                   "URL told (JSON POST) when the job ends or has validation samples "
                   "(repeatable; docs/notifications.md)")
      ->allow_extra_args(false);
  submit_cmd->add_flag("--dry-run", submit.dry_run,
                       "check everything and show what the job would get now (devices or why "
                       "it would wait, GPU memory estimate); submit nothing");
  submit_cmd->add_flag("--wait", submit.wait, "wait for the job to end; exit code by outcome");
  submit_cmd->add_flag("--follow", submit.follow,
                       "show live progress until the job ends; exit code by outcome");
  submit_cmd->add_option("--timeout", submit.timeout,
                         "with --wait/--follow: give up after S seconds");
  submit_cmd->callback(run([&](Client& c) { return Submit(c, g, submit); }));

  ListArgs list;
  auto* ls = app.add_subcommand("ls", "list jobs (newest first)");
  ls->alias("list");
  ls->add_option("--state", list.states, "only jobs in these states (repeatable)");
  ls->add_option("--limit", list.limit, "at most N jobs (newest first; says how many more)")
      ->capture_default_str();
  ls->add_flag("--all", list.all, "every job, page by page");
  ls->add_option("--label", list.labels, "only jobs with this label k=v (repeatable: all of them)");
  ls->add_flag("--mine", list.mine, "only the jobs this token submitted");
  ls->add_option("--group", list.group, "a sweep's jobs (label group=G), with a summary");
  ls->callback(run([&](Client& c) { return List(c, g, list); }));

  add_job_command("describe", "show one job: state, why it waits, ranks, events")
      ->alias("show")
      ->callback(run([&](Client& c) { return Describe(c, g, job_id); }));

  LogsArgs logs;
  auto* logs_cmd = add_job_command("logs", "print a rank's log (stdout+stderr of adworker)");
  logs_cmd->add_flag("-f,--follow", logs.follow, "keep printing until the job ends");
  logs_cmd->add_option("--rank", logs.rank, "rank")->capture_default_str();
  logs_cmd->add_option("--attempt", logs.attempt, "attempt (default: the latest, then later ones)");
  logs_cmd->add_option("--tail", logs.tail, "start this many bytes before the end");
  logs_cmd->callback(run([&](Client& c) { return Logs(c, job_id, logs); }));

  double timeout = 0;
  auto* watch = add_job_command("watch", "live progress until the job ends; exit code by outcome");
  watch->add_option("--timeout", timeout, "give up after S seconds (exit 4)");
  watch->callback(run([&](Client& c) { return FollowJob(c, job_id, timeout, g.json()); }));

  // cancel, pause and resume: one JOB, or every job with --label k=v (after a confirmation).
  BulkArgs bulk;
  auto add_bulk_command = [&](const char* name, const char* help) {
    CLI::App* sub = app.add_subcommand(name, help);
    sub->add_option("JOB", job_id, "job id (or --label)");
    sub->add_option("--label", bulk.labels,
                    "every job with this label k=v (repeatable: all of them) instead of JOB");
    sub->add_flag("-y,--yes", bulk.yes, "with --label: no confirmation");
    return sub;
  };
  using v1::JOB_STATE_QUEUED, v1::JOB_STATE_STARTING, v1::JOB_STATE_RUNNING,
      v1::JOB_STATE_RESTARTING, v1::JOB_STATE_PAUSING, v1::JOB_STATE_PAUSED;
  StopArgs stop;
  auto* cancel = add_bulk_command("cancel", "stop a job for good (SIGTERM, grace, SIGKILL)");
  cancel->add_flag("--force", stop.force, "SIGKILL now");
  cancel->add_option("--grace", stop.grace,
                     "seconds between SIGTERM and SIGKILL (default: the spec's)");
  cancel->callback(run([&](Client& c) {
    if (!OneTarget("cancel", job_id, bulk)) return kExitUsage;
    if (!job_id.empty()) return Cancel(c, g, job_id, stop);
    return Bulk(c, "cancel", bulk,
                {JOB_STATE_QUEUED, JOB_STATE_STARTING, JOB_STATE_RUNNING, JOB_STATE_RESTARTING,
                 JOB_STATE_PAUSING, JOB_STATE_PAUSED},
                [&](const std::string& id) { return Cancel(c, g, id, stop); });
  }));
  auto* pause = add_bulk_command("pause", "checkpoint and stop a job, keeping it resumable");
  pause->add_option("--grace", stop.grace, "seconds to wait for the checkpoint before SIGKILL");
  pause->callback(run([&](Client& c) {
    if (!OneTarget("pause", job_id, bulk)) return kExitUsage;
    if (!job_id.empty()) return Pause(c, g, job_id, stop);
    return Bulk(c, "pause", bulk,
                {JOB_STATE_QUEUED, JOB_STATE_STARTING, JOB_STATE_RUNNING, JOB_STATE_RESTARTING},
                [&](const std::string& id) { return Pause(c, g, id, stop); });
  }));

  std::optional<int> resume_gpus;
  auto* resume = add_bulk_command(
      "resume", "continue a paused job from its newest checkpoint (optionally on N ranks)");
  resume->add_option("--gpus", resume_gpus,
                     "run on N ranks; train.grad_accum is recomputed to keep the global batch");
  resume->callback(run([&](Client& c) {
    if (!OneTarget("resume", job_id, bulk)) return kExitUsage;
    if (!job_id.empty()) return Resume(c, g, job_id, resume_gpus);
    return Bulk(c, "resume", bulk, {JOB_STATE_PAUSED},
                [&](const std::string& id) { return Resume(c, g, id, resume_gpus); });
  }));

  std::optional<int> new_priority;
  auto* set = add_bulk_command(
      "set",
      "change a job's priority: a queued job takes its new place, a running one may "
      "preempt or be preempted");
  set->add_option("--priority", new_priority, "higher runs first")->required();
  set->callback(run([&](Client& c) {
    if (!OneTarget("set", job_id, bulk)) return kExitUsage;
    if (!job_id.empty()) return SetPriority(c, g, job_id, *new_priority);
    return Bulk(c, "set the priority of", bulk,
                {JOB_STATE_QUEUED, JOB_STATE_STARTING, JOB_STATE_RUNNING, JOB_STATE_RESTARTING,
                 JOB_STATE_PAUSING, JOB_STATE_PAUSED},
                [&](const std::string& id) { return SetPriority(c, g, id, *new_priority); });
  }));

  auto* wait = add_job_command(
      "wait", "wait until a job ends: exit 0 SUCCEEDED, 1 FAILED, 3 CANCELLED, 4 timeout");
  wait->add_option("--timeout", timeout, "give up after S seconds (exit 4)");
  wait->callback(run([&](Client& c) { return WaitForJob(c, job_id, timeout, g.json()); }));

  auto* ckpt = app.add_subcommand("ckpt", "checkpoints");
  ckpt->require_subcommand(1);
  auto* ckpt_ls = ckpt->add_subcommand("ls", "list a job's checkpoints");
  ckpt_ls->add_option("JOB", job_id, "job id")->required();
  ckpt_ls->callback(run([&](Client& c) { return Checkpoints(c, g, job_id); }));
  int64_t pin_step = 0;
  for (const bool pin : {true, false}) {
    auto* cmd = ckpt->add_subcommand(
        pin ? "pin" : "unpin", pin ? "keep a checkpoint through retention (checkpoint.keep_last)"
                                   : "let retention delete a pinned checkpoint again");
    cmd->add_option("JOB", job_id, "job id")->required();
    cmd->add_option("STEP", pin_step, "the checkpoint's step")->required();
    cmd->callback(run([&, pin](Client& c) { return PinCheckpoint(c, g, job_id, pin_step, pin); }));
  }

  add_job_command("events", "a job's event history")->callback(run([&](Client& c) {
    return Events(c, g, job_id);
  }));

  SamplesArgs samples;
  auto* samples_cmd = add_job_command("samples", "a job's validation samples (MP4 and GIF)");
  samples_cmd->add_option("--step", samples.step, "only this step");
  samples_cmd->add_option("--download", samples.download,
                          "save the files into this folder (step-N/sample-I.mp4, ...)");
  samples_cmd->callback(run([&](Client& c) { return Samples(c, g, job_id, samples); }));

  ExportArgs exp;
  auto* export_cmd = add_job_command(
      "export",
      "save the trained motion modules (or LoRA) for diffusers, ComfyUI or AUTOMATIC1111");
  export_cmd->add_option("--step", exp.step, "a committed checkpoint's step (default: newest)");
  export_cmd
      ->add_option("--format", exp.format,
                   "diffusers (a MotionAdapter folder) or animatediff (one .safetensors file); a "
                   "LoRA job's: diffusers-lora (a folder with pytorch_lora_weights.safetensors), "
                   "animatediff-lora (one MotionLoRA file) or merged (a folder: the base motion "
                   "module with the LoRA merged in, both layouts)")
      ->required()
      ->check(CLI::IsMember(
          {"diffusers", "animatediff", "diffusers-lora", "animatediff-lora", "merged"}));
  export_cmd
      ->add_option("--out", exp.out,
                   "where to write it (a folder for diffusers, diffusers-lora and merged; a "
                   "file for animatediff and animatediff-lora)")
      ->required();
  export_cmd
      ->add_option("--weights", exp.weights,
                   "raw (the trained weights) or ema (train.ema's moving average, kept in the "
                   "checkpoint's ema/ folder)")
      ->check(CLI::IsMember({"raw", "ema"}))
      ->capture_default_str();
  export_cmd->callback(run([&](Client& c) { return Export(c, g, job_id, exp); }));

  add_job_command("exports", "a job's exports (adctl export and the spec's export:)")
      ->callback(run([&](Client& c) { return Exports(c, g, job_id); }));

  std::string other_job_id;
  auto* diff =
      app.add_subcommand("diff", "two jobs side by side: spec fields that differ, latest metrics");
  diff->add_option("A", job_id, "job id")->required();
  diff->add_option("B", other_job_id, "job id")->required();
  diff->callback(run([&](Client& c) { return Diff(c, g.json(), job_id, other_job_id); }));

  app.add_subcommand("gpus", "the coordinator's GPUs (or CPU slots) and who holds them")
      ->callback(run([&](Client& c) { return Devices(c, g); }));

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return code == 0 ? 0 : kExitUsage;
  }
  return rc;
}

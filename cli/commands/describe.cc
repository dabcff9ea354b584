// adctl describe JOB (alias show): one job's state, why it waits, progress, ranks and its latest
// events.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>

#include "cli/commands/commands.h"
#include "cli/render.h"
#include "cli/select.h"

namespace adctl::cli {
namespace {

using Stub = v1::JobService::Stub;

int Describe(Client& c, const Context& ctx, const std::string& job_id) {
  v1::GetJobRequest req;
  req.set_job_id(job_id);
  v1::Job job;
  if (int rc = c.Call(&Stub::GetJob, req, &job); rc != 0) return rc;
  if (PrintedAsJson(ctx, job)) return 0;
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

}  // namespace

void RegisterDescribe(CLI::App& app, Context& ctx) {
  auto job_id = std::make_shared<std::string>();
  AddJobCommand(app, "describe", "show one job: state, why it waits, ranks, events", job_id.get())
      ->alias("show")
      ->callback(ctx.Run([&ctx, job_id](Client& c) { return Describe(c, ctx, *job_id); }));
}

}  // namespace adctl::cli

// adctl cancel, pause, resume and set --priority: on one JOB, or with --label k=v on every
// matching job in a state the verb applies to (after a confirmation; cli/select.h).
#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include "cli/commands/commands.h"
#include "cli/render.h"
#include "cli/select.h"

namespace adctl::cli {
namespace {

using Stub = v1::JobService::Stub;

struct StopArgs {  // cancel and pause
  bool force = false;
  std::optional<double> grace;
};

// A command whose answer is a job (cancel, pause, resume, set): one line, or JSON.
template <typename Request>
int CallAndPrintJob(Client& c, const Context& ctx,
                    grpc::Status (Stub::*method)(grpc::ClientContext*, const Request&, v1::Job*),
                    const Request& req) {
  v1::Job job;
  if (int rc = c.Call(method, req, &job); rc != 0) return rc;
  if (PrintedAsJson(ctx, job)) return 0;
  std::cout << job.id() << " " << StateName(job.state())
            << (job.message().empty() ? "" : ": " + job.message()) << "\n";
  return 0;
}

int Cancel(Client& c, const Context& ctx, const std::string& job_id, const StopArgs& a) {
  v1::CancelJobRequest req;
  req.set_job_id(job_id);
  req.set_force(a.force);
  if (a.grace) req.set_grace_seconds(*a.grace);
  return CallAndPrintJob(c, ctx, &Stub::CancelJob, req);
}

int Pause(Client& c, const Context& ctx, const std::string& job_id, const StopArgs& a) {
  v1::PauseJobRequest req;
  req.set_job_id(job_id);
  if (a.grace) req.set_grace_seconds(*a.grace);
  return CallAndPrintJob(c, ctx, &Stub::PauseJob, req);
}

int Resume(Client& c, const Context& ctx, const std::string& job_id, std::optional<int> gpus) {
  v1::ResumeJobRequest req;
  req.set_job_id(job_id);
  if (gpus) req.set_gpus(*gpus);
  return CallAndPrintJob(c, ctx, &Stub::ResumeJob, req);
}

int SetPriority(Client& c, const Context& ctx, const std::string& job_id, int priority) {
  v1::SetJobPriorityRequest req;
  req.set_job_id(job_id);
  req.set_priority(priority);
  return CallAndPrintJob(c, ctx, &Stub::SetJobPriority, req);
}

// The options of one of these commands (each has its own).
struct ControlArgs {
  std::string job_id;           // JOB, or "" with --label
  BulkArgs bulk;                // --label, --yes
  StopArgs stop;                // cancel, pause
  std::optional<int> gpus;      // resume --gpus
  std::optional<int> priority;  // set --priority
};

// cancel, pause, resume and set: one JOB, or every job with --label k=v (after a confirmation).
CLI::App* AddBulkCommand(CLI::App& app, const char* name, const char* help, ControlArgs* a) {
  CLI::App* sub = app.add_subcommand(name, help);
  sub->add_option("JOB", a->job_id, "job id (or --label)");
  sub->add_option("--label", a->bulk.labels,
                  "every job with this label k=v (repeatable: all of them) instead of JOB");
  sub->add_flag("-y,--yes", a->bulk.yes, "with --label: no confirmation");
  return sub;
}

}  // namespace

void RegisterControl(CLI::App& app, Context& ctx) {
  using v1::JOB_STATE_QUEUED, v1::JOB_STATE_STARTING, v1::JOB_STATE_RUNNING,
      v1::JOB_STATE_RESTARTING, v1::JOB_STATE_PAUSING, v1::JOB_STATE_PAUSED;

  auto cancel_args = std::make_shared<ControlArgs>();
  auto* cancel = AddBulkCommand(app, "cancel", "stop a job for good (SIGTERM, grace, SIGKILL)",
                                cancel_args.get());
  cancel->add_flag("--force", cancel_args->stop.force, "SIGKILL now");
  cancel->add_option("--grace", cancel_args->stop.grace,
                     "seconds between SIGTERM and SIGKILL (default: the spec's)");
  cancel->callback(ctx.Run([&ctx, a = cancel_args](Client& c) {
    if (!OneTarget("cancel", a->job_id, a->bulk)) return kExitUsage;
    if (!a->job_id.empty()) return Cancel(c, ctx, a->job_id, a->stop);
    return Bulk(c, "cancel", a->bulk,
                {JOB_STATE_QUEUED, JOB_STATE_STARTING, JOB_STATE_RUNNING, JOB_STATE_RESTARTING,
                 JOB_STATE_PAUSING, JOB_STATE_PAUSED},
                [&](const std::string& id) { return Cancel(c, ctx, id, a->stop); });
  }));

  auto pause_args = std::make_shared<ControlArgs>();
  auto* pause = AddBulkCommand(app, "pause", "checkpoint and stop a job, keeping it resumable",
                               pause_args.get());
  pause->add_option("--grace", pause_args->stop.grace,
                    "seconds to wait for the checkpoint before SIGKILL");
  pause->callback(ctx.Run([&ctx, a = pause_args](Client& c) {
    if (!OneTarget("pause", a->job_id, a->bulk)) return kExitUsage;
    if (!a->job_id.empty()) return Pause(c, ctx, a->job_id, a->stop);
    return Bulk(c, "pause", a->bulk,
                {JOB_STATE_QUEUED, JOB_STATE_STARTING, JOB_STATE_RUNNING, JOB_STATE_RESTARTING},
                [&](const std::string& id) { return Pause(c, ctx, id, a->stop); });
  }));

  auto resume_args = std::make_shared<ControlArgs>();
  auto* resume = AddBulkCommand(
      app, "resume", "continue a paused job from its newest checkpoint (optionally on N ranks)",
      resume_args.get());
  resume->add_option("--gpus", resume_args->gpus,
                     "run on N ranks; train.grad_accum is recomputed to keep the global batch");
  resume->callback(ctx.Run([&ctx, a = resume_args](Client& c) {
    if (!OneTarget("resume", a->job_id, a->bulk)) return kExitUsage;
    if (!a->job_id.empty()) return Resume(c, ctx, a->job_id, a->gpus);
    return Bulk(c, "resume", a->bulk, {JOB_STATE_PAUSED},
                [&](const std::string& id) { return Resume(c, ctx, id, a->gpus); });
  }));

  auto set_args = std::make_shared<ControlArgs>();
  auto* set = AddBulkCommand(app, "set",
                             "change a job's priority: a queued job takes its new place, a "
                             "running one may preempt or be preempted",
                             set_args.get());
  set->add_option("--priority", set_args->priority, "higher runs first")->required();
  set->callback(ctx.Run([&ctx, a = set_args](Client& c) {
    if (!OneTarget("set", a->job_id, a->bulk)) return kExitUsage;
    if (!a->job_id.empty()) return SetPriority(c, ctx, a->job_id, *a->priority);
    return Bulk(c, "set the priority of", a->bulk,
                {JOB_STATE_QUEUED, JOB_STATE_STARTING, JOB_STATE_RUNNING, JOB_STATE_RESTARTING,
                 JOB_STATE_PAUSING, JOB_STATE_PAUSED},
                [&](const std::string& id) { return SetPriority(c, ctx, id, *a->priority); });
  }));
}

}  // namespace adctl::cli

// adctl submit FILE: one job, or with --sweep one job per point of the product; --dry-run shows
// what the job would get without submitting it; --wait and --follow end as wait and watch do.
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "cli/commands/commands.h"
#include "cli/render.h"
#include "cli/select.h"
#include "cli/sweep.h"
#include "common/job_spec.h"
#include "common/status.h"

namespace adctl::cli {
namespace {

using Stub = v1::JobService::Stub;

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

// submit --sweep: one job per point of the product, all labelled group=G and path=value per
// swept field; with --submission-id S, job k's id is S/k, so the whole sweep is idempotent.
int SubmitSweep(Client& c, const Context& ctx, const SubmitArgs& a,
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
    if (ctx.json()) {
      out["jobs"].push_back(nlohmann::json::parse(ToJson(resp.job())));
    } else {
      std::cout << (resp.created() ? "submitted " : "already submitted ") << resp.job().id() << " ("
                << described << ")\n";
    }
  }
  if (ctx.json()) {
    std::cout << out.dump() << "\n";
  } else {
    std::cout << "group " << group << ": " << submitted << " job(s); adctl ls --group " << group
              << "\n";
  }
  return 0;
}

int Submit(Client& c, const Context& ctx, const SubmitArgs& a) {
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
    if (!PrintedAsJson(ctx, resp.plan())) std::cout << RenderPlan(resp.plan());
    return 0;
  }
  if (!a.sweeps.empty()) return SubmitSweep(c, ctx, a, req);
  v1::SubmitJobResponse resp;
  if (int rc = c.Call(&Stub::SubmitJob, req, &resp); rc != 0) return rc;
  // With -o json and --wait / --follow, stdout is the outcome only (the final job, or the
  // update lines whose first one is the job as submitted).
  if (ctx.json() && (a.wait || a.follow)) {
    if (!resp.created()) std::cerr << "already submitted " << resp.job().id() << "\n";
  } else if (!PrintedAsJson(ctx, resp)) {
    std::cout << (resp.created() ? "submitted " : "already submitted ") << resp.job().id() << " ("
              << resp.job().name() << ", " << resp.job().gpus() << " rank(s), "
              << StateName(resp.job().state()) << ")\n";
  }
  if (a.follow) return FollowJob(c, resp.job().id(), a.timeout, ctx.json());
  if (a.wait) return WaitForJob(c, resp.job().id(), a.timeout, ctx.json());
  return 0;
}

}  // namespace

void RegisterSubmit(CLI::App& app, Context& ctx) {
  auto a = std::make_shared<SubmitArgs>();
  auto* cmd = app.add_subcommand("submit", "submit a job spec (YAML; docs/job-spec.md)");
  cmd->add_option("FILE", a->spec_file, "job spec file")->required();
  cmd->add_option("--set", a->sets, "override a spec field: --set train.lr=3e-4 (repeatable)");
  cmd->add_option("--gpus", a->gpus, "ranks (GPUs, or CPU slots); overrides resources.gpus");
  cmd->add_option("--priority", a->priority, "higher runs first; overrides resources.priority");
  cmd->add_option("--submission-id", a->submission_id,
                  "idempotency key: resubmitting with the same id returns the same job");
  cmd->add_option("--after", a->after,
                  "start only after these jobs SUCCEEDED (J[,K...], repeatable; Slurm's "
                  "afterok): if one ends otherwise, this job FAILS without a rank");
  cmd->add_flag("--after-any", a->after_any,
                "with --after: start after those jobs end, however they end");
  cmd->add_option("--label", a->labels,
                  "a label k=v (repeatable): ls, cancel, pause and resume select by it");
  cmd->add_option("--sweep", a->sweeps,
                  "path=v1,v2 (repeatable): one job per combination of the values, in a "
                  "group (adctl ls --group G)");
  cmd->add_option("--webhook", a->webhooks,
                  "URL told (JSON POST) when the job ends or has validation samples "
                  "(repeatable; docs/notifications.md)")
      ->allow_extra_args(false);
  cmd->add_flag("--dry-run", a->dry_run,
                "check everything and show what the job would get now (devices or why "
                "it would wait, GPU memory estimate); submit nothing");
  cmd->add_flag("--wait", a->wait, "wait for the job to end; exit code by outcome");
  cmd->add_flag("--follow", a->follow,
                "show live progress until the job ends; exit code by outcome");
  cmd->add_option("--timeout", a->timeout, "with --wait/--follow: give up after S seconds");
  cmd->callback(ctx.Run([&ctx, a](Client& c) { return Submit(c, ctx, *a); }));
}

}  // namespace adctl::cli

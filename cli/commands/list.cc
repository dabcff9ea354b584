// adctl ls: jobs newest first, page by page up to --limit (or all of them), filtered by state,
// label, submitter or sweep group (a group's jobs with a summary line).
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands/commands.h"
#include "cli/render.h"
#include "cli/select.h"
#include "cli/sweep.h"

namespace adctl::cli {
namespace {

using Stub = v1::JobService::Stub;

struct ListArgs {
  std::vector<std::string> states;
  int limit = 50;
  bool all = false;
  std::vector<std::string> labels;  // --label k=v: only jobs with every one
  bool mine = false;                // only the jobs this token submitted
  std::string group;                // --group G: a sweep's jobs, with a summary
};

int List(Client& c, const Context& ctx, const ListArgs& a) {
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
  if (ctx.json()) {
    std::cout << ToJson(resp, JsonLayout::kIndented) << "\n";
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

}  // namespace

void RegisterList(CLI::App& app, Context& ctx) {
  auto a = std::make_shared<ListArgs>();
  auto* ls = app.add_subcommand("ls", "list jobs (newest first)");
  ls->alias("list");
  ls->add_option("--state", a->states, "only jobs in these states (repeatable)");
  ls->add_option("--limit", a->limit, "at most N jobs (newest first; says how many more)")
      ->capture_default_str();
  ls->add_flag("--all", a->all, "every job, page by page");
  ls->add_option("--label", a->labels, "only jobs with this label k=v (repeatable: all of them)");
  ls->add_flag("--mine", a->mine, "only the jobs this token submitted");
  ls->add_option("--group", a->group, "a sweep's jobs (label group=G), with a summary");
  ls->callback(ctx.Run([&ctx, a](Client& c) { return List(c, ctx, *a); }));
}

}  // namespace adctl::cli

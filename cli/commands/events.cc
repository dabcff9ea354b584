// adctl events JOB: a job's event history.
#include <iostream>
#include <memory>
#include <string>

#include "cli/commands/commands.h"
#include "cli/render.h"

namespace adctl::cli {
namespace {

using Stub = v1::JobService::Stub;

int Events(Client& c, const Context& ctx, const std::string& job_id) {
  v1::ListEventsRequest req;
  req.set_job_id(job_id);
  v1::ListEventsResponse resp;
  if (int rc = c.Call(&Stub::ListEvents, req, &resp); rc != 0) return rc;
  if (PrintedAsJson(ctx, resp)) return 0;
  Table t({"TIME", "ATTEMPT", "KIND", "LEVEL", "MESSAGE"});
  for (const auto& e : resp.events()) {
    t.Add({TimeOfDay(e.time()), std::to_string(e.attempt()), e.kind(), e.level(), e.message()});
  }
  std::cout << t.ToString();
  return 0;
}

}  // namespace

void RegisterEvents(CLI::App& app, Context& ctx) {
  auto job_id = std::make_shared<std::string>();
  AddJobCommand(app, "events", "a job's event history", job_id.get())
      ->callback(ctx.Run([&ctx, job_id](Client& c) { return Events(c, ctx, *job_id); }));
}

}  // namespace adctl::cli

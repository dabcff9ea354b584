// adctl gpus: the coordinator's devices (GPUs, or CPU slots) and the jobs holding them.
#include <iostream>

#include "cli/commands/commands.h"
#include "cli/render.h"

namespace adctl::cli {
namespace {

using Stub = v1::JobService::Stub;

int Devices(Client& c, const Context& ctx) {
  v1::ListDevicesResponse resp;
  if (int rc = c.Call(&Stub::ListDevices, v1::ListDevicesRequest(), &resp); rc != 0) return rc;
  if (PrintedAsJson(ctx, resp)) return 0;
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

void RegisterDevices(CLI::App& app, Context& ctx) {
  app.add_subcommand("gpus", "the coordinator's GPUs (or CPU slots) and who holds them")
      ->callback(ctx.Run([&ctx](Client& c) { return Devices(c, ctx); }));
}

}  // namespace adctl::cli

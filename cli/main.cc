// adctl: the command line of the adctl training-job service (thin over adctl.v1.JobService).
//
// Exit codes: 0 ok / job SUCCEEDED, 1 job FAILED or server error, 2 usage or validation error
// (also unknown job ids, TLS set up wrong), 3 job CANCELLED, 4 --timeout passed, 5 adctld
// unreachable, 6 `wait`: the job is PAUSED.
//
// main builds the App and its global flags; each subcommand's options, registration and body
// live together in cli/commands/<verb>.cc.
#include <grpc/support/log.h>

#include <CLI/CLI.hpp>
#include <cstdlib>

#include "cli/client.h"
#include "cli/commands/commands.h"

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
  Context ctx;
  app.add_option("--server", ctx.server,
                 "adctld address host:port, or unix:PATH of a tokenless adctld's socket (env "
                 "ADCTL_SERVER, config `server:`; default: $ADCTL_DATA_DIR/adctld.sock, else "
                 "./adctl-data/adctld.sock when it exists, else localhost:50051); token from env "
                 "ADCTL_TOKEN or `token:` in ~/.config/adctl/config.yaml");
  app.add_option("-o,--output", ctx.output, "output format")
      ->check(CLI::IsMember({"table", "json"}))
      ->capture_default_str();

  // In the order `adctl --help` lists them.
  RegisterSubmit(app, ctx);
  RegisterList(app, ctx);
  RegisterDescribe(app, ctx);
  RegisterLogs(app, ctx);
  RegisterWatch(app, ctx);
  RegisterControl(app, ctx);
  RegisterWait(app, ctx);
  RegisterCheckpoints(app, ctx);
  RegisterEvents(app, ctx);
  RegisterSamples(app, ctx);
  RegisterExport(app, ctx);
  RegisterDiff(app, ctx);
  RegisterDevices(app, ctx);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return code == 0 ? 0 : kExitUsage;
  }
  return ctx.exit_code;
}

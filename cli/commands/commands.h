// adctl's subcommands. Each verb (or small family of verbs) lives in cli/commands/<verb>.cc with
// its options, its run function and its Register function together; main.cc builds the App,
// its global flags, and calls the Register functions in the order `adctl --help` lists them.
//
// Every run function returns the process exit code (cli/client.h).
#pragma once
#include <google/protobuf/message.h>

#include <CLI/CLI.hpp>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>

#include "adctl/v1/job_service.pb.h"
#include "cli/client.h"

namespace adctl::cli {

// What the global flags set, and the exit code the subcommand that ran leaves. Outlives the App:
// the callbacks hold a reference.
struct Context {
  std::string server;            // --server
  std::string output = "table";  // -o,--output: table | json
  int exit_code = 0;             // set by the subcommand's callback
  bool json() const { return output == "json"; }

  // A subcommand's callback: connects to adctld (--server, else the environment and config) and
  // runs `command` with the client, its result the exit code; a connection that cannot be set up
  // (a TLS file that cannot be read) is a usage error. Registration only: nothing runs before
  // the command line is parsed, so the callbacks read the global flags as given.
  std::function<void()> Run(std::function<int(Client&)> command);
};

// Each adds its subcommand(s) to `app`, their callbacks running through ctx.Run. A command's
// options live in a shared_ptr its callback holds, so they last as long as the App. In the order
// `adctl --help` lists them (main.cc calls them so).
void RegisterSubmit(CLI::App& app, Context& ctx);       // submit (and --sweep)
void RegisterList(CLI::App& app, Context& ctx);         // ls
void RegisterDescribe(CLI::App& app, Context& ctx);     // describe
void RegisterLogs(CLI::App& app, Context& ctx);         // logs
void RegisterWatch(CLI::App& app, Context& ctx);        // watch
void RegisterControl(CLI::App& app, Context& ctx);      // cancel, pause, resume, set
void RegisterWait(CLI::App& app, Context& ctx);         // wait
void RegisterCheckpoints(CLI::App& app, Context& ctx);  // ckpt ls | pin | unpin
void RegisterEvents(CLI::App& app, Context& ctx);       // events
void RegisterSamples(CLI::App& app, Context& ctx);      // samples
void RegisterExport(CLI::App& app, Context& ctx);       // export, exports
void RegisterDiff(CLI::App& app, Context& ctx);         // diff
void RegisterDevices(CLI::App& app, Context& ctx);      // gpus

// --- Shared by the commands (commands.cc, follow.cc).

// A subcommand of one required JOB positional, the id stored in *job_id.
CLI::App* AddJobCommand(CLI::App& app, const char* name, const char* help, std::string* job_id);

// With `-o json`: prints the message as JSON and returns true; the caller prints its table else.
bool PrintedAsJson(const Context& ctx, const google::protobuf::Message& message);

// Unix time in seconds.
double Now();

// "14:03:59", local time.
std::string TimeOfDay(double unix_seconds);

// Downloads the artifact `relative` of a job to `dest` (through `dest`.part, renamed when the
// whole file arrived), adding its size to *bytes. Returns 0, or an exit code after printing why.
int Download(Client& c, const std::string& job_id, const std::string& relative,
             const std::filesystem::path& dest, int64_t* bytes);

// follow.cc: submit --wait and --follow end as wait and watch do.
//
// Polls GetJob until a terminal state, then prints the outcome (`json`: the final job as JSON);
// tolerates adctld restarts for up to 60 s.
int WaitForJob(Client& client, const std::string& id, double timeout_seconds, bool json);
// Streams WatchJob with a live progress line until the job ends (`json`: each update as one JSON
// line, the job snapshot, an event or a metric point, and nothing else on stdout); reconnects
// across adctld restarts (resuming after the last event seen).
int FollowJob(Client& client, const std::string& id, double timeout_seconds, bool json);

}  // namespace adctl::cli

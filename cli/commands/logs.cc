// adctl logs JOB: a rank's log (adworker's stdout and stderr), or with -f to the job's end.
#include <chrono>
#include <cstdint>
#include <iostream>
#include <memory>
#include <string>
#include <thread>

#include "cli/commands/commands.h"

namespace adctl::cli {
namespace {

struct LogsArgs {
  std::string job_id;
  bool follow = false;
  int rank = 0, attempt = 0;
  int64_t tail = 0;
};

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

}  // namespace

void RegisterLogs(CLI::App& app, Context& ctx) {
  auto a = std::make_shared<LogsArgs>();
  auto* cmd =
      AddJobCommand(app, "logs", "print a rank's log (stdout+stderr of adworker)", &a->job_id);
  cmd->add_flag("-f,--follow", a->follow, "keep printing until the job ends");
  cmd->add_option("--rank", a->rank, "rank")->capture_default_str();
  cmd->add_option("--attempt", a->attempt, "attempt (default: the latest, then later ones)");
  cmd->add_option("--tail", a->tail, "start this many bytes before the end");
  cmd->callback(ctx.Run([a](Client& c) { return Logs(c, a->job_id, *a); }));
}

}  // namespace adctl::cli

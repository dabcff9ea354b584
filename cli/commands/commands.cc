// What the subcommands share: the callback wrapper, the JOB subcommand, JSON output, time, and
// artifact downloads.
#include "cli/commands/commands.h"

#include <chrono>
#include <ctime>
#include <fstream>
#include <iostream>
#include <utility>

#include "cli/render.h"

namespace adctl::cli {

std::function<void()> Context::Run(std::function<int(Client&)> command) {
  return [this, command = std::move(command)] {
    Client c(ResolveConnection(server));
    if (!c.setup_error().empty()) {
      std::cerr << "adctl: " << c.setup_error() << "\n";
      exit_code = kExitUsage;
      return;
    }
    exit_code = command(c);
  };
}

CLI::App* AddJobCommand(CLI::App& app, const char* name, const char* help, std::string* job_id) {
  CLI::App* sub = app.add_subcommand(name, help);
  sub->add_option("JOB", *job_id, "job id")->required();
  return sub;
}

bool PrintedAsJson(const Context& ctx, const google::protobuf::Message& message) {
  if (!ctx.json()) return false;
  std::cout << ToJson(message, JsonLayout::kIndented) << "\n";
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

}  // namespace adctl::cli

#include "common/job_layout.h"

#include <cstdio>
#include <filesystem>
#include <sstream>

namespace adctl {

namespace {

// "step-00000042", the naming of checkpoint directories too.
std::string StepDirName(int64_t step) {
  char name[32];
  std::snprintf(name, sizeof(name), "step-%08lld", static_cast<long long>(step));
  return name;
}

}  // namespace

std::string JobLayout::spec() const { return dir_ + "/spec.yaml"; }

std::string JobLayout::preset_unet2d() const { return dir_ + "/model/unet2d"; }

std::string JobLayout::checkpoint_pins() const { return dir_ + "/checkpoint_pins.json"; }

std::string JobLayout::rollbacks() const { return dir_ + "/rollbacks.json"; }

std::string JobLayout::checkpoints(const std::string& spec_checkpoint_dir) const {
  return spec_checkpoint_dir.empty() ? dir_ + "/checkpoints" : spec_checkpoint_dir;
}

std::string JobLayout::logs() const { return dir_ + "/logs"; }

std::string JobLayout::attempt_logs(int attempt) const {
  return logs() + "/attempt-" + std::to_string(attempt);
}

std::string JobLayout::rank_log(int attempt, int rank) const {
  return attempt_logs(attempt) + "/rank-" + std::to_string(rank) + ".log";
}

std::string JobLayout::rank_exit(int attempt, int rank) const {
  return attempt_logs(attempt) + "/rank-" + std::to_string(rank) + ".exit";
}

std::string JobLayout::rank_pending_reports(int attempt, int rank) const {
  return attempt_logs(attempt) + "/rank-" + std::to_string(rank) + ".pending";
}

std::string JobLayout::rendezvous(int attempt) const {
  return dir_ + "/rendezvous/attempt-" + std::to_string(attempt);
}

std::string JobLayout::samples() const { return dir_ + "/samples"; }

std::string JobLayout::samples_step(int64_t step) const {
  return samples() + "/" + StepDirName(step);
}

std::string JobLayout::exports() const { return dir_ + "/export"; }

std::string JobLayout::exports_step(int64_t step) const {
  return exports() + "/" + StepDirName(step);
}

Result<std::string> JobLayout::artifact(const std::string& relative) const {
  namespace fs = std::filesystem;
  const auto bad = [&](const std::string& why) {
    return InvalidArgument("artifact path '" + relative.substr(0, 200) + "': " + why);
  };
  if (relative.empty() || relative.front() == '/') return bad("must be relative to the job");
  std::stringstream parts(relative);
  std::string part, first;
  while (std::getline(parts, part, '/')) {
    if (part.empty() || part == "." || part == "..") return bad("no empty, '.' or '..' parts");
    if (first.empty()) first = part;
  }
  if (relative.back() == '/') return bad("names a folder");
  if (first != "samples" && first != "export") return bad("not under samples/ or export/");
  const std::string path = dir_ + "/" + relative;
  std::error_code ec;
  if (fs::exists(path, ec)) {
    const fs::path real = fs::canonical(path, ec);
    const fs::path root = fs::canonical(dir_ + "/" + first, ec);
    if (ec) return bad(ec.message());
    const std::string r = real.string(), top = root.string() + "/";
    if (r.compare(0, top.size(), top) != 0) return bad("leads outside the job's " + first + "/");
  }
  return path;
}

}  // namespace adctl

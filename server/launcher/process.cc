#include "server/launcher/process.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <string.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace adctl {

namespace {

// Reads /proc/<pid>/stat: state (field 3) and start time (field 22). The command name (field 2)
// may contain spaces and parentheses, so parsing starts after the last ')'.
bool ReadStat(pid_t pid, char* state, uint64_t* start_time) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  if (!in) return false;
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t close = text.rfind(')');
  if (close == std::string::npos) return false;
  std::istringstream fields(text.substr(close + 2));
  std::string field;
  // Fields from 3 on; start time is field 22, i.e. the 20th after the command.
  for (int i = 3; i <= 22; ++i) {
    if (!(fields >> field)) return false;
    if (i == 3) *state = field.empty() ? '?' : field[0];
    if (i == 22) *start_time = std::stoull(field);
  }
  return true;
}

}  // namespace

uint64_t ProcessStartTime(pid_t pid) {
  char state = 0;
  uint64_t start = 0;
  if (pid <= 0 || !ReadStat(pid, &state, &start)) return 0;
  return start;
}

bool ProcessAlive(pid_t pid, uint64_t start_time) {
  char state = 0;
  uint64_t start = 0;
  if (pid <= 0 || !ReadStat(pid, &state, &start)) return false;
  if (state == 'Z' || state == 'X') return false;
  return start_time == 0 || start == start_time;
}

bool ProcessGroupExists(pid_t pgid) {
  if (pgid <= 1) return false;
  if (killpg(pgid, 0) != 0 && errno != EPERM) return false;
  // killpg also succeeds for zombies, which an init that does not reap (containers) can keep
  // forever. Look for a live member in /proc.
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(entry.path() / "stat");
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    size_t close = text.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream fields(text.substr(close + 2));
    std::string state, ppid, pgrp;
    if (!(fields >> state >> ppid >> pgrp)) continue;
    if (pgrp == std::to_string(pgid) && state != "Z" && state != "X") return true;
  }
  return false;
}

Status SignalProcessGroup(pid_t pgid, int signal) {
  if (pgid <= 1) return InvalidArgument("refusing to signal process group " + std::to_string(pgid));
  if (killpg(pgid, signal) == 0 || errno == ESRCH) return Status::Ok();
  return Internal("killpg(" + std::to_string(pgid) + ", " + std::to_string(signal) +
                  "): " + strerror(errno));
}

std::string ExitStatus::ToString() const {
  if (signal != 0) {
    const char* name = strsignal(signal);
    return "killed by signal " + std::to_string(signal) +
           (name ? std::string(" (") + name + ")" : "");
  }
  return "exited with code " + std::to_string(exit_code);
}

Result<ExitStatus> ReadExitFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return NotFound("no exit file " + path);
  std::string kind;
  int value = 0;
  if (!(in >> kind >> value)) return DataLoss("malformed exit file " + path);
  ExitStatus st;
  if (kind == "exit") {
    st.exit_code = value;
  } else if (kind == "signal") {
    st.signal = value;
  } else {
    return DataLoss("malformed exit file " + path);
  }
  return st;
}

void ResetSignalsForExec() {
  struct sigaction dfl;
  memset(&dfl, 0, sizeof(dfl));
  dfl.sa_handler = SIG_DFL;
  for (int s = 1; s < NSIG; ++s) sigaction(s, &dfl, nullptr);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
}

std::vector<pid_t> ProcessesWithArgument(const std::string& flag, const std::string& value) {
  std::vector<pid_t> out;
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return out;
  while (const dirent* e = readdir(proc)) {
    char* end = nullptr;
    const long pid = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || pid <= 0) continue;
    std::ifstream in("/proc/" + std::string(e->d_name) + "/cmdline", std::ios::binary);
    std::string arg, previous;
    while (std::getline(in, arg, '\0')) {
      if (previous == flag && arg == value) {
        if (ProcessAlive(static_cast<pid_t>(pid), 0)) out.push_back(static_cast<pid_t>(pid));
        break;
      }
      previous = std::move(arg);
    }
  }
  closedir(proc);
  return out;
}

}  // namespace adctl

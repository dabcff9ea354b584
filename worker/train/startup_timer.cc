#include "worker/train/startup_timer.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace adctl {
namespace {

using SteadyClock = std::chrono::steady_clock;

double Seconds(SteadyClock::time_point a, SteadyClock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Seconds since this process was started (exec), from /proc; 0 where unreadable.
double SecondsSinceProcessStart() {
  std::ifstream stat("/proc/self/stat"), uptime("/proc/uptime");
  std::string text;
  double up = 0;
  if (!std::getline(stat, text) || !(uptime >> up)) return 0;
  // Field 22 (starttime, clock ticks after boot) counts from the field after "(comm)".
  std::istringstream rest(text.substr(text.rfind(')') + 2));
  std::string field;
  for (int i = 3; i <= 22 && rest >> field; ++i) {
  }
  const double started = std::strtod(field.c_str(), nullptr) / sysconf(_SC_CLK_TCK);
  return std::max(0.0, up - started);
}

std::string FormatPhase(const char* phase, double seconds) {
  char text[96];
  std::snprintf(text, sizeof(text), "%s %.2f s", phase, seconds);
  return text;
}

}  // namespace

StartupTimer::StartupTimer()
    : last_(SteadyClock::now()),
      last_usage_(ProcessUsageNow()),
      before_(SecondsSinceProcessStart()) {}

void StartupTimer::Mark(const char* phase) {
  const auto now = SteadyClock::now();
  const auto usage = ProcessUsageNow();
  phases_.push_back({phase, Seconds(last_, now), usage.cpu_seconds - last_usage_.cpu_seconds,
                     usage.major_faults - last_usage_.major_faults});
  last_ = now;
  last_usage_ = usage;
}

std::string StartupTimer::Summary() const {
  double total = before_;
  std::string parts = FormatPhase("exec and libraries", before_);
  for (const auto& p : phases_) {
    total += p.seconds;
    parts += ", " + FormatPhase(p.name, p.seconds);
    if (p.seconds >= 1.0) {
      char usage[96];
      std::snprintf(usage, sizeof(usage), ": CPU %.1f s, %ld major page faults", p.cpu_seconds,
                    p.major_faults);
      parts += usage;
    }
  }
  char head[96];
  std::snprintf(head, sizeof(head), "start-up: %.1f s from process start to the first step (",
                total);
  return head + parts + ")";
}

}  // namespace adctl

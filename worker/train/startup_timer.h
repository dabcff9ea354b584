// Where a rank's start-up time goes, for the one start-up event of a run: phases in order, each
// the time since the previous mark; a phase over a second also says how much of it was CPU work
// and how many pages it read from disk (what separates compiling, paging in libraries and
// waiting on the device). Torch-free; one thread.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "worker/report/device_sampler.h"

namespace adctl {

class StartupTimer {
 public:
  StartupTimer();
  // Ends the phase `phase` (a string literal) now.
  void Mark(const char* phase);
  // "2.2 s from process start to the first step (exec and libraries 0.3 s, ..., first forward
  // 1.3 s: CPU 1.4 s, 0 major page faults, first backward 0.4 s, rest of the first step 0.0 s)".
  std::string Summary() const;

 private:
  struct Phase {
    const char* name;
    double seconds, cpu_seconds;
    long major_faults;
  };
  std::chrono::steady_clock::time_point last_;
  ProcessUsage last_usage_;
  double before_;  // exec to the timer's construction
  std::vector<Phase> phases_;
};

}  // namespace adctl

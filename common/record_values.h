// What rank 0 reports of a committed checkpoint and of a rendered validation sample, each listed
// once, as common/metric_values.h lists a step's values.
//
// The worker fills them (worker/report/reporter.h), sends them as the v1::Checkpoint and
// v1::Sample fields of the same names (proto/record_values.h converts through the lists below),
// adctld keeps them in store columns of the same names (server/store: CheckpointRecord and
// SampleRecord are these values plus who sent them and when) and serves them back as the same
// messages; the worker's `--metrics-out` lines are written from the lists too. Adding a value:
// its field in job_service.proto, a member and a line below, a store migration adding its
// column; then its uses (the CLI, the web page). tests/server/convert_test.cc checks the lists
// against the proto.
#pragma once

#include <cstdint>
#include <string>

namespace adctl {

struct CheckpointValues {
  int64_t step = 0;
  std::string path;  // the committed directory
  int64_t size_bytes = 0;
  double save_seconds = 0;   // writing, hashing and committing it (in the background)
  double stall_seconds = 0;  // training time it took (copying the state to host memory)
};

template <typename Values, typename F>
void ForEachCheckpointValue(Values& c, F&& f) {
  f("step", c.step);
  f("path", c.path);
  f("size_bytes", c.size_bytes);
  f("save_seconds", c.save_seconds);
  f("stall_seconds", c.stall_seconds);
}

// One validation sample file pair, or a step's grid of all prompts.
struct SampleValues {
  int64_t step = 0;    // optimizer steps done when it was rendered
  int32_t index = 0;   // prompt index in validation.prompts; -1: the grid
  std::string prompt;  // "" for the grid
  std::string mp4;     // relative to the job directory
  std::string gif;
  double render_seconds = 0;  // rendering it (the grid: the whole step's)
};

template <typename Values, typename F>
void ForEachSampleValue(Values& s, F&& f) {
  f("step", s.step);
  f("index", s.index);
  f("prompt", s.prompt);
  f("mp4", s.mp4);
  f("gif", s.gif);
  f("render_seconds", s.render_seconds);
}

// The lists as callables, for code that takes a list (a function template cannot be passed by
// name): proto/record_values.h's conversions, the store's column lists.
inline constexpr auto kCheckpointValues = [](auto& values, auto&& f) {
  ForEachCheckpointValue(values, f);
};
inline constexpr auto kSampleValues = [](auto& values, auto&& f) { ForEachSampleValue(values, f); };

}  // namespace adctl

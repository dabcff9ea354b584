// How adctl prints: aligned tables, durations, the live progress line, and JSON (the proto
// messages with their field names).
#pragma once

#include <google/protobuf/message.h>

#include <string>
#include <vector>

#include "adctl/v1/job_service.pb.h"
#include "proto/json.h"  // ToJson: indented for -o json, compact for JSON lines

namespace adctl::cli {

// "QUEUED" for JOB_STATE_QUEUED.
std::string StateName(v1::JobState state);
bool IsTerminalState(v1::JobState state);
// 4 → "4s", 125 → "2m05s", 7300 → "2h01m".
std::string FormatDuration(double seconds);
// 0.114 → "0.11s", 7.93 → "7.9s", 42 → "42s" (FormatDuration from 10 s).
std::string FormatSeconds(double seconds);
std::string FormatBytes(int64_t bytes);
// "4/6 (67%)" or "-" before the first step.
std::string FormatProgress(const v1::Progress& p);
// "j-3fa2c1 RUNNING step 4/6 (67%) loss 0.1234 2.5 clips/s ETA 3s".
std::string ProgressLine(const v1::Job& job);
// Whether `job` trains (and so has a loss and checkpoints): not a preprocess job.
bool Trains(const v1::Job& job);
// A preprocess job's own progress: "shards 7/8 (87%), 12 clips written, 3 skipped (missing 1,
// truncated 2), 4.20 videos/s" (reasons with a count only; `with_reasons` false: the total).
std::string PreprocessLine(const v1::PreprocessProgress& p, bool with_reasons);

// `adctl submit --dry-run`: what the job would get now, its peak memory estimate against the
// GPUs', and who would be told; several lines.
std::string RenderPlan(const v1::SubmitPlan& plan);

class Table {
 public:
  explicit Table(std::vector<std::string> header) : rows_{std::move(header)} {}
  void Add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  std::string ToString() const;

 private:
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace adctl::cli

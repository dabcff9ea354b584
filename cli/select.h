// Selecting jobs by label for adctl's bulk commands: `--label k=v` parsing, the labels as text,
// and cancel | pause | resume on every matching job after a confirmation.
#pragma once

#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "cli/client.h"

namespace adctl::cli {

// cancel, pause and resume on every job with these labels instead of one JOB.
struct BulkArgs {
  std::vector<std::string> labels;
  bool yes = false;  // no confirmation
};

// "k=v" pairs into a label map; false (and a message on stderr) for one without '='.
bool ParseLabels(const std::vector<std::string>& pairs,
                 google::protobuf::Map<std::string, std::string>* out);

// "k=v, k2=v2", sorted by key.
std::string LabelsText(const google::protobuf::Map<std::string, std::string>& labels);

// `verb` ("cancel", "pause", "resume") on every job that carries all of `a.labels` and is in one
// of `states` (the ones the verb applies to): the list first (stderr), then a confirmation (or
// --yes; without a terminal to ask on, --yes is needed), then `one` per job. The worst exit
// code wins; no matching job is exit 0.
int Bulk(Client& c, const char* verb, const BulkArgs& a,
         std::initializer_list<adctl::v1::JobState> states,
         const std::function<int(const std::string&)>& one);

// Exactly one of JOB and --label was given (else a message and false).
bool OneTarget(const char* verb, const std::string& job_id, const BulkArgs& bulk);

}  // namespace adctl::cli

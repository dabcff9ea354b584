// What adctld checks at submit beyond the spec itself, from the inputs' small files and
// safetensors headers (Torch-free, no tensor is read): a job that could only fail on its first
// step is refused with the field named, before it queues.
//
//   - `data.frames` and `validation.frames` within the motion modules' positional table (the
//     frames they hold: a preset's layout, a MotionAdapter's or UNetMotionModel's
//     `motion_max_seq_length`, an AnimateDiff file's `pos_encoder.pe` length);
//   - a latent cache (`data.path`, each of `data.sources`, `eval.path`) exists, unless a
//     preprocess job in the queue is writing it;
//   - `data.frames`, when the spec sets it, equals the frames the cache was made with
//     (otherwise the cache's would be used silently);
//   - the caches of a mix (`data.sources`) agree on frames and pixel size.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/job_spec.h"
#include "common/status.h"

namespace adctl {

// The frames the motion modules of `m` hold (model.motion_max_frames when it extends their
// table); nullopt when that cannot be told without loading them (a .ckpt file, a folder that
// is not there yet).
std::optional<int64_t> MotionFramesLimit(const ModelSpec& m);

// The frames a clip of a latent cache (its settings.json): one entry, or one a shape bucket
// (preprocess.buckets); empty when it does not say.
std::vector<int64_t> CacheFrames(const std::string& cache_dir);

// Whether a spec's YAML text or its `--set` overrides ("data.frames=8") name the dotted field
// `path` (as opposed to leaving its default).
bool SpecNamesField(const std::string& yaml_text, const std::vector<std::string>& overrides,
                    const std::string& path);

struct SubmitInputs {
  bool data_frames_set = false;                // the spec (or a --set) names data.frames
  std::set<std::string> caches_being_written;  // preprocess.output of the queued and running jobs
};

// Ok, or InvalidArgument naming the field and what was found.
Status CheckSubmitInputs(const JobSpec& spec, const SubmitInputs& inputs);

}  // namespace adctl

// Which files a job may name: checked when it is submitted (and its spec rewritten on resume),
// before anything runs. Inputs (model folders and files, datasets) must be absolute and, when
// adctld has --read-root folders, inside one of them or inside a job's folder (another job's
// cache or export). Outputs (checkpoint.dir, preprocess.output) must be absolute, never inside
// a job's folder (the job's own default is used when they are empty) nor over adctld's data
// directory, and, when adctld has --write-root folders, inside one of them. Paths are compared
// after resolving the symlinks of the part that exists. Messages name the field and the path,
// never a file's contents.
#pragma once

#include <string>
#include <vector>

#include "common/job_spec.h"
#include "common/status.h"
#include "server/store/store.h"

namespace adctl {

struct PathRoots {
  std::vector<std::string> read;   // empty: inputs may be anywhere adctld can read
  std::vector<std::string> write;  // empty: outputs anywhere outside adctld's data directory
};

// Checked at submit and again at each launch (a folder swapped for a symlink since the submit
// fails the launch, naming the field). A NUL byte in a path is refused.
Status CheckSpecPaths(const JobSpec& spec, const std::string& data_dir, const PathRoots& roots);

// Whether two paths name the same folder once their existing parts' symlinks are resolved.
bool SameFolder(const std::string& a, const std::string& b);

// FailedPrecondition when another live (not ended) job than `job_id` has `checkpoint_dir` as
// its checkpoint.dir: the second would resume from the first's weights and its retention would
// delete the first's checkpoints. Checked at submit and at each launch.
Status CheckCheckpointDirFree(Store* store, const std::string& checkpoint_dir,
                              const std::string& job_id);

}  // namespace adctl

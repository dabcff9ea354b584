#include "server/supervisor/path_policy.h"

#include <filesystem>
#include <utility>

namespace adctl {

namespace {

namespace fs = std::filesystem;

// `path` with its existing prefix's symlinks resolved and `.`/`..` folded.
fs::path Resolved(const std::string& path) {
  std::error_code ec;
  fs::path p = fs::weakly_canonical(path, ec);
  return ec ? fs::path(path).lexically_normal() : p;
}

// Whether `path` is `root` or below it.
bool Inside(const fs::path& path, const fs::path& root) {
  const std::string p = path.string(), r = root.string();
  if (r == "/") return true;
  return p == r || (p.size() > r.size() && p.compare(0, r.size(), r) == 0 && p[r.size()] == '/');
}

std::string List(const std::vector<std::string>& roots) {
  std::string out;
  for (const std::string& r : roots) out += (out.empty() ? "" : ", ") + r;
  return out;
}

Status NeedAbsolute(const std::string& field, const std::string& path) {
  if (path.find('\0') != std::string::npos) {
    // The C library would stop at it: the checked path and the one used would differ.
    return InvalidArgument(field + ": the path has a NUL byte");
  }
  if (!path.empty() && path.front() == '/') return Status::Ok();
  return InvalidArgument(field + ": '" + path.substr(0, 200) +
                         "' must be an absolute path (a relative one would be read against "
                         "adctld's working directory)");
}

}  // namespace

Status CheckSpecPaths(const JobSpec& spec, const std::string& data_dir, const PathRoots& roots) {
  const fs::path data = Resolved(data_dir);
  const fs::path jobs = data / "jobs";
  std::vector<std::pair<std::string, std::string>> inputs = {
      {"model.pretrained", spec.model.pretrained},
      {"model.unet2d", spec.model.unet2d},
      {"model.motion_adapter", spec.model.motion_adapter},
      {"model.unet_motion", spec.model.unet_motion},
      {"model.motion_module_file", spec.model.motion_module_file},
      {"model.lora.init_from", spec.model.lora.init_from},
      {"data.path", spec.data.path},
      {"data.csv", spec.data.csv},
      {"data.video_dir", spec.data.video_dir},
      {"eval.path", spec.eval.path},
  };
  for (size_t i = 0; i < spec.data.sources.size(); ++i) {
    inputs.emplace_back("data.sources[" + std::to_string(i) + "].path", spec.data.sources[i].path);
  }
  for (const auto& [field, path] : inputs) {
    if (path.empty()) continue;
    ADCTL_RETURN_IF_ERROR(NeedAbsolute(field, path));
    if (roots.read.empty()) continue;
    const fs::path p = Resolved(path);
    bool allowed = Inside(p, jobs);
    for (const std::string& r : roots.read) allowed = allowed || Inside(p, Resolved(r));
    if (!allowed) {
      return InvalidArgument(
          field + ": '" + path.substr(0, 200) +
          "' is outside the folders adctld may read (--read-root: " + List(roots.read) + ")");
    }
  }
  const std::vector<std::pair<std::string, std::string>> outputs = {
      {"checkpoint.dir", spec.checkpoint.dir},
      {"preprocess.output", spec.preprocess.output},
  };
  for (const auto& [field, path] : outputs) {
    if (path.empty()) continue;
    ADCTL_RETURN_IF_ERROR(NeedAbsolute(field, path));
    const fs::path p = Resolved(path);
    if (Inside(p, jobs) || Inside(data, p)) {
      return InvalidArgument(field + ": '" + path.substr(0, 200) +
                             "' is inside adctld's job folders or over its data directory " +
                             data.string() +
                             "; leave it empty for the job's own folder, or name another place");
    }
    if (roots.write.empty()) continue;
    bool allowed = false;
    for (const std::string& r : roots.write) allowed = allowed || Inside(p, Resolved(r));
    if (!allowed) {
      return InvalidArgument(
          field + ": '" + path.substr(0, 200) +
          "' is outside the folders adctld may write (--write-root: " + List(roots.write) + ")");
    }
  }
  return Status::Ok();
}

bool SameFolder(const std::string& a, const std::string& b) {
  return !a.empty() && !b.empty() && Resolved(a) == Resolved(b);
}

Status CheckCheckpointDirFree(Store* store, const std::string& checkpoint_dir,
                              const std::string& job_id) {
  if (checkpoint_dir.empty()) return Status::Ok();
  auto live = store->ListActiveJobs();
  if (!live.ok()) return live.status();
  for (const JobRecord& other : live.value()) {
    if (other.id == job_id || !SameFolder(other.checkpoint_dir, checkpoint_dir)) continue;
    return FailedPrecondition(
        "checkpoint.dir: '" + checkpoint_dir.substr(0, 200) + "' is the checkpoint folder of job " +
        other.id + " (" + JobStateName(other.state) +
        "); two live jobs cannot share one (the second would resume from the first's weights "
        "and delete its checkpoints): name another folder, or wait until " +
        other.id + " ends");
  }
  return Status::Ok();
}

}  // namespace adctl

// Checkpoint directory commit / verify / retention (protocol in checkpoint_dir.h).
#include "common/checkpoint_dir.h"

#include <fcntl.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <thread>

#include "common/fs_util.h"
#include "common/sha256.h"

namespace adctl {
namespace fs = std::filesystem;
namespace {

constexpr const char* kTmpPrefix = ".tmp-step-";
constexpr const char* kTrashPrefix = ".trash-step-";

std::string Errno(const std::string& what, const std::string& path, int err) {
  return what + " " + path + ": " + std::strerror(err);
}

// fsync a file or directory by path.
Status SyncPath(const std::string& path, bool directory) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | (directory ? O_DIRECTORY : 0));
  if (fd < 0) return Internal(Errno("cannot open", path, errno));
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0) return Internal(Errno("cannot fsync", path, err));
  return Status::Ok();
}

// Reads the file once to hash it, fsyncs it, and fills `entry->bytes` and `entry->sha256`.
Status HashAndSync(const std::string& path, CheckpointFileEntry* entry) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Internal(Errno("cannot open", path, errno));
  Sha256 hasher;
  std::string buffer(1 << 20, '\0');
  int64_t bytes = 0;
  while (true) {
    ssize_t n = ::read(fd, buffer.data(), buffer.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      ::close(fd);
      return Internal(Errno("cannot read", path, err));
    }
    if (n == 0) break;
    hasher.Update(buffer.data(), static_cast<size_t>(n));
    bytes += n;
  }
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0) return Internal(Errno("cannot fsync", path, err));
  entry->bytes = bytes;
  entry->sha256 = hasher.HexDigest();
  return Status::Ok();
}

// Runs fn(0..n-1) on up to 8 threads, each taking the next index (callers order the work
// largest first); returns the error of the lowest failing index. A checkpoint is a handful of
// multi-GB files, and hashing them is the slow part of a commit or a verification.
Status ParallelOverFiles(size_t n, const std::function<Status(size_t)>& fn) {
  const size_t threads =
      std::min<size_t>({n, std::max(1u, std::thread::hardware_concurrency()), size_t{8}});
  std::vector<Status> results(n, Status::Ok());
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next++; i < n; i = next++) results[i] = fn(i);
  };
  std::vector<std::thread> workers;
  for (size_t t = 1; t < threads; ++t) workers.emplace_back(work);
  work();
  for (auto& w : workers) w.join();
  for (auto& r : results) {
    if (!r.ok()) return r;
  }
  return Status::Ok();
}

// Indices of `paths` by decreasing file size (missing files last).
std::vector<size_t> LargestFirst(const std::vector<std::string>& paths) {
  std::vector<std::pair<uintmax_t, size_t>> sized;
  for (size_t i = 0; i < paths.size(); ++i) {
    std::error_code ec;
    const uintmax_t size = fs::file_size(paths[i], ec);
    sized.push_back({ec ? 0 : size, i});
  }
  std::sort(sized.begin(), sized.end(), std::greater<>());
  std::vector<size_t> order;
  for (const auto& [size, i] : sized) order.push_back(i);
  return order;
}

// HashAndSync for every entry (paths relative to `dir`).
Status HashAndSyncAll(const std::string& dir, std::vector<CheckpointFileEntry>* entries) {
  std::vector<std::string> paths;
  for (const auto& e : *entries) paths.push_back((fs::path(dir) / e.path).string());
  const std::vector<size_t> order = LargestFirst(paths);
  return ParallelOverFiles(
      order.size(), [&](size_t k) { return HashAndSync(paths[order[k]], &(*entries)[order[k]]); });
}

Status WriteAndSync(const std::string& path, const std::string& contents) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Internal(Errno("cannot create", path, errno));
  size_t written = 0;
  while (written < contents.size()) {
    ssize_t n = ::write(fd, contents.data() + written, contents.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      ::close(fd);
      return Internal(Errno("cannot write", path, err));
    }
    written += static_cast<size_t>(n);
  }
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0) return Internal(Errno("cannot fsync", path, err));
  return Status::Ok();
}

// Parses "<prefix><digits>" (all of `name`), or "<prefix><digits>-<pid>" when `pid` is given.
bool ParseStepName(const std::string& name, const std::string& prefix, int64_t* step,
                   int64_t* pid = nullptr) {
  if (name.compare(0, prefix.size(), prefix) != 0) return false;
  auto parse_digits = [](const std::string& s, int64_t* out) {
    if (s.empty() || s.size() > 18) return false;
    for (char c : s) {
      if (c < '0' || c > '9') return false;
    }
    *out = std::stoll(s);
    return true;
  };
  std::string rest = name.substr(prefix.size());
  if (pid == nullptr) return parse_digits(rest, step);
  size_t dash = rest.find('-');
  if (dash == std::string::npos) return false;
  return parse_digits(rest.substr(0, dash), step) && parse_digits(rest.substr(dash + 1), pid);
}

bool ProcessAlive(int64_t pid) {
  if (pid <= 0) return false;
  if (pid == ::getpid()) return true;
  return ::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM;
}

int64_t DirectoryBytes(const fs::path& dir) {
  int64_t total = 0;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code size_ec;
    if (it->is_regular_file(size_ec)) {
      auto size = it->file_size(size_ec);
      if (!size_ec) total += static_cast<int64_t>(size);
    }
  }
  return total;
}

// A manifest path must stay inside the checkpoint directory.
bool SafeRelativePath(const std::string& p) {
  if (p.empty() || p[0] == '/') return false;
  for (const auto& part : fs::path(p)) {
    if (part == ".." || part == ".") return false;
  }
  return true;
}

Status RemoveCounted(const fs::path& path, RetentionResult* result) {
  int64_t bytes = DirectoryBytes(path);
  Result<int64_t> removed = RemoveTree(path.string());
  if (!removed.ok()) return removed.status();
  if (*removed > 0) {
    result->removed.push_back(path.string());
    result->bytes_freed += bytes;
  }
  return Status::Ok();
}

}  // namespace

std::string CheckpointDirName(int64_t step) {
  char buf[40];
  std::snprintf(buf, sizeof(buf), "step-%08" PRId64, step);
  return buf;
}

// ---- CheckpointManifest ------------------------------------------------------------------------

int64_t CheckpointManifest::TotalBytes() const {
  int64_t total = 0;
  for (const auto& f : files) total += f.bytes;
  return total;
}

nlohmann::json CheckpointManifest::ToJson() const {
  nlohmann::json files_json = nlohmann::json::array();
  for (const auto& f : files) {
    files_json.push_back({{"path", f.path}, {"bytes", f.bytes}, {"sha256", f.sha256}});
  }
  return {{"format_version", format_version},
          {"step", step},
          {"created_unix", created_unix},
          {"metadata", metadata},
          {"files", files_json}};
}

Result<CheckpointManifest> CheckpointManifest::FromJson(const nlohmann::json& j) {
  auto bad = [](const std::string& what) { return DataLoss("manifest: " + what); };
  if (!j.is_object()) return bad("not a JSON object");
  CheckpointManifest m;
  for (auto [key, out] : {std::pair<const char*, int64_t*>{"format_version", &m.format_version},
                          {"step", &m.step},
                          {"created_unix", &m.created_unix}}) {
    auto it = j.find(key);
    if (it == j.end() || !it->is_number_integer()) {
      return bad(std::string("'") + key + "' missing or not an integer");
    }
    *out = it->get<int64_t>();
  }
  auto metadata = j.find("metadata");
  if (metadata == j.end() || !metadata->is_object())
    return bad("'metadata' missing or not an object");
  m.metadata = *metadata;
  auto files = j.find("files");
  if (files == j.end() || !files->is_array()) return bad("'files' missing or not an array");
  for (const auto& f : *files) {
    if (!f.is_object() || !f.contains("path") || !f["path"].is_string() || !f.contains("bytes") ||
        !f["bytes"].is_number_integer() || !f.contains("sha256") || !f["sha256"].is_string()) {
      return bad("malformed entry in 'files': " + f.dump());
    }
    CheckpointFileEntry entry{f["path"].get<std::string>(), f["bytes"].get<int64_t>(),
                              f["sha256"].get<std::string>()};
    if (!SafeRelativePath(entry.path)) return bad("unsafe file path '" + entry.path + "'");
    m.files.push_back(std::move(entry));
  }
  return m;
}

// ---- CheckpointWriter --------------------------------------------------------------------------

Result<CheckpointWriter> CheckpointWriter::Begin(const std::string& root, int64_t step) {
  if (step < 0) return InvalidArgument("checkpoint step must be >= 0, got " + std::to_string(step));
  std::error_code ec;
  if (Status made = MakePrivateDirectories(root); !made.ok()) {
    return Internal("checkpoint root: " + made.message());
  }
  fs::path tmp = fs::path(root) / (kTmpPrefix + CheckpointDirName(step).substr(5) + "-" +
                                   std::to_string(::getpid()));
  if (auto removed = RemoveTree(tmp.string()); !removed.ok()) {
    return Internal("cannot remove leftover " + tmp.string() + ": " + removed.status().message());
  }
  if (!fs::create_directory(tmp, ec) || ec) {
    return Internal("cannot create " + tmp.string() + ": " + ec.message());
  }
  return CheckpointWriter(root, tmp.string(), step);
}

CheckpointWriter::CheckpointWriter(CheckpointWriter&& other) noexcept
    : root_(std::move(other.root_)),
      tmp_dir_(std::move(other.tmp_dir_)),
      step_(other.step_),
      done_(other.done_) {
  other.done_ = true;
}

CheckpointWriter& CheckpointWriter::operator=(CheckpointWriter&& other) noexcept {
  if (this != &other) {
    Abort();
    root_ = std::move(other.root_);
    tmp_dir_ = std::move(other.tmp_dir_);
    step_ = other.step_;
    done_ = other.done_;
    other.done_ = true;
  }
  return *this;
}

CheckpointWriter::~CheckpointWriter() { Abort(); }

void CheckpointWriter::Abort() {
  if (done_) return;
  if (auto removed = RemoveTree(tmp_dir_); !removed.ok()) {
    spdlog::warn("checkpoint: {}", removed.status().message());
  }
  done_ = true;
}

Result<std::string> CheckpointWriter::Commit(const nlohmann::json& metadata) {
  if (done_) return FailedPrecondition("checkpoint " + tmp_dir_ + " already committed or aborted");
  if (!metadata.is_null() && !metadata.is_object()) {
    return InvalidArgument("checkpoint metadata must be a JSON object, got " + metadata.dump());
  }
  CheckpointManifest manifest;
  manifest.step = step_;
  manifest.created_unix = static_cast<int64_t>(std::time(nullptr));
  manifest.metadata = metadata.is_null() ? nlohmann::json::object() : metadata;

  // 1. Every file: hash + fsync; every subdirectory: fsync.
  std::error_code ec;
  std::vector<std::string> subdirs;
  for (fs::recursive_directory_iterator it(tmp_dir_, ec), end; it != end; it.increment(ec)) {
    if (ec) break;
    const fs::path rel = fs::relative(it->path(), tmp_dir_);
    if (it->is_symlink()) {
      return InvalidArgument("checkpoint " + tmp_dir_ + ": " + rel.string() +
                             " is a symlink; only regular files are allowed");
    }
    if (it->is_directory()) {
      subdirs.push_back(it->path().string());
      continue;
    }
    if (!it->is_regular_file()) {
      return InvalidArgument("checkpoint " + tmp_dir_ + ": " + rel.string() +
                             " is not a regular file");
    }
    if (rel == kCheckpointManifestName) {
      return InvalidArgument("checkpoint " + tmp_dir_ + ": '" + kCheckpointManifestName +
                             "' is reserved for the manifest");
    }
    CheckpointFileEntry entry;
    entry.path = rel.generic_string();
    manifest.files.push_back(std::move(entry));
  }
  if (ec) return Internal("cannot list " + tmp_dir_ + ": " + ec.message());
  ADCTL_RETURN_IF_ERROR(HashAndSyncAll(tmp_dir_, &manifest.files));
  std::sort(manifest.files.begin(), manifest.files.end(),
            [](const auto& a, const auto& b) { return a.path < b.path; });
  for (const std::string& d : subdirs) ADCTL_RETURN_IF_ERROR(SyncPath(d, /*directory=*/true));

  // 2. The manifest, then the directory that holds it.
  const std::string manifest_path = (fs::path(tmp_dir_) / kCheckpointManifestName).string();
  ADCTL_RETURN_IF_ERROR(WriteAndSync(manifest_path, manifest.ToJson().dump(2) + "\n"));
  ADCTL_RETURN_IF_ERROR(SyncPath(tmp_dir_, /*directory=*/true));

  // 3. Publish: rename into place (moving a same-step directory aside first), fsync the root.
  const fs::path final_dir = fs::path(root_) / CheckpointDirName(step_);
  fs::path trash;
  if (fs::exists(final_dir, ec)) {
    trash = fs::path(root_) /
            (kTrashPrefix + CheckpointDirName(step_).substr(5) + "-" + std::to_string(::getpid()));
    (void)RemoveTree(trash.string());
    if (::rename(final_dir.c_str(), trash.c_str()) != 0) {
      return Internal(Errno("cannot move aside", final_dir.string(), errno));
    }
    spdlog::warn("checkpoint: replacing existing {}", final_dir.string());
  }
  if (::rename(tmp_dir_.c_str(), final_dir.c_str()) != 0) {
    return Internal(Errno("cannot rename " + tmp_dir_ + " to", final_dir.string(), errno));
  }
  done_ = true;
  ADCTL_RETURN_IF_ERROR(SyncPath(root_, /*directory=*/true));
  if (!trash.empty()) {
    if (auto removed = RemoveTree(trash.string()); !removed.ok()) {
      spdlog::warn("checkpoint: {}", removed.status().message());
    }
  }
  return final_dir.string();
}

// ---- Listing, verification, retention ----------------------------------------------------------

Result<std::vector<CheckpointInfo>> ListCheckpoints(const std::string& root) {
  std::vector<CheckpointInfo> out;
  std::error_code ec;
  if (!fs::exists(root, ec)) return out;
  if (!fs::is_directory(root, ec))
    return InvalidArgument("checkpoint root " + root + " is not a directory");
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    int64_t step = 0;
    std::error_code type_ec;
    if (!it->is_directory(type_ec) || it->is_symlink(type_ec)) continue;
    if (!ParseStepName(it->path().filename().string(), "step-", &step)) continue;
    out.push_back({step, it->path().string(), DirectoryBytes(it->path())});
  }
  if (ec) return Internal("cannot list checkpoint root " + root + ": " + ec.message());
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.step < b.step; });
  return out;
}

namespace {
// One manifest entry against the file on disk: regular file, size, then sha256.
Status VerifyFile(const std::string& path, const CheckpointFileEntry& f) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    return DataLoss(path + ": listed in the manifest but " + std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode)) return DataLoss(path + ": not a regular file");
  if (st.st_size != f.bytes) {
    return DataLoss(path + ": size " + std::to_string(st.st_size) + " bytes, manifest says " +
                    std::to_string(f.bytes));
  }
  Result<std::string> sha = Sha256File(path);
  if (!sha.ok()) return DataLoss(path + ": " + sha.status().message());
  if (sha.value() != f.sha256) {
    return DataLoss(path + ": sha256 " + sha.value() + " does not match the manifest's " +
                    f.sha256);
  }
  return Status::Ok();
}
}  // namespace

Result<CheckpointManifest> VerifyCheckpoint(const std::string& dir) {
  const std::string manifest_path = (fs::path(dir) / kCheckpointManifestName).string();
  std::ifstream in(manifest_path, std::ios::binary);
  if (!in) return DataLoss(manifest_path + ": missing or unreadable");
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json j = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return DataLoss(manifest_path + ": not valid JSON");
  Result<CheckpointManifest> parsed = CheckpointManifest::FromJson(j);
  if (!parsed.ok()) return DataLoss(manifest_path + ": " + parsed.status().message());
  CheckpointManifest& m = parsed.value();
  if (m.format_version > kCheckpointFormatVersion) {
    return FailedPrecondition(manifest_path + ": format_version " +
                              std::to_string(m.format_version) + " is newer than this build's " +
                              std::to_string(kCheckpointFormatVersion));
  }
  if (m.format_version < 1) {
    return DataLoss(manifest_path + ": bad format_version " + std::to_string(m.format_version));
  }
  int64_t dir_step = 0;
  if (ParseStepName(fs::path(dir).lexically_normal().filename().string(), "step-", &dir_step) &&
      dir_step != m.step) {
    return DataLoss(manifest_path + ": step " + std::to_string(m.step) +
                    " does not match the directory name");
  }
  std::vector<std::string> paths;
  for (const CheckpointFileEntry& f : m.files) paths.push_back((fs::path(dir) / f.path).string());
  const std::vector<size_t> order = LargestFirst(paths);
  std::vector<Status> errors(paths.size(), Status::Ok());
  (void)ParallelOverFiles(order.size(), [&](size_t k) {
    const size_t i = order[k];
    errors[i] = VerifyFile(paths[i], m.files[i]);
    return errors[i];
  });
  // The first listed file that fails, whatever finished first.
  for (const Status& e : errors) {
    if (!e.ok()) return e;
  }
  return parsed;
}

Result<std::optional<VerifiedCheckpoint>> LatestVerifiedCheckpoint(const std::string& root) {
  Result<std::vector<CheckpointInfo>> list = ListCheckpoints(root);
  if (!list.ok()) return list.status();
  for (auto it = list->rbegin(); it != list->rend(); ++it) {
    Result<CheckpointManifest> manifest = VerifyCheckpoint(it->path);
    if (manifest.ok()) {
      return std::optional<VerifiedCheckpoint>(
          VerifiedCheckpoint{*it, std::move(manifest).value()});
    }
    spdlog::warn("checkpoint: skipping {} (does not verify: {})", it->path,
                 manifest.status().ToString());
  }
  return std::optional<VerifiedCheckpoint>();
}

bool RetentionPolicy::Spares(int64_t step) const {
  return (keep_every > 0 && step % keep_every == 0) || pinned.count(step) > 0 ||
         (keep_step && keep_step(step));
}

Result<RetentionResult> ApplyRetention(const std::string& root, int64_t keep_last,
                                       const std::string& protect_path) {
  RetentionPolicy policy = RetentionPolicy::KeepLast(keep_last);
  policy.protect_path = protect_path;
  return ApplyRetention(root, policy);
}

namespace {

// The steps of the policy.keep_best checkpoints with the lowest policy.best_metric, read from
// their manifests (unverified: retention only ranks). Unreadable manifests do not compete.
std::set<int64_t> BestSteps(const std::vector<CheckpointInfo>& list,
                            const RetentionPolicy& policy) {
  if (policy.keep_best <= 0 || policy.best_metric.empty()) return {};
  std::vector<std::pair<double, int64_t>> scored;
  for (const CheckpointInfo& c : list) {
    try {
      const nlohmann::json j =
          nlohmann::json::parse(ReadFileText(c.path + "/" + kCheckpointManifestName));
      const auto& m = j.at("metadata");
      const auto it = m.find(policy.best_metric);
      if (it == m.end() || !it->is_number()) continue;
      const double v = it->get<double>();
      if (std::isfinite(v)) scored.emplace_back(v, c.step);
    } catch (const std::exception&) {
      continue;  // vanished or malformed: not a candidate
    }
  }
  std::sort(scored.begin(), scored.end());
  std::set<int64_t> steps;
  for (size_t i = 0; i < scored.size() && static_cast<int64_t>(i) < policy.keep_best; ++i) {
    steps.insert(scored[i].second);
  }
  return steps;
}

}  // namespace

Result<RetentionResult> ApplyRetention(const std::string& root, const RetentionPolicy& policy) {
  if (policy.keep_last < 1) {
    return InvalidArgument("checkpoint.keep_last: must be >= 1, got " +
                           std::to_string(policy.keep_last));
  }
  RetentionResult result;
  Result<std::vector<CheckpointInfo>> list = ListCheckpoints(root);
  if (!list.ok()) return list.status();
  std::error_code ec;
  const fs::path protect =
      policy.protect_path.empty() ? fs::path() : fs::weakly_canonical(policy.protect_path, ec);
  Status first_error;
  const int64_t excess = static_cast<int64_t>(list->size()) - policy.keep_last;
  const std::set<int64_t> best = BestSteps(*list, policy);
  for (int64_t i = 0; i < excess; ++i) {
    const CheckpointInfo& c = (*list)[i];
    if (!protect.empty() && fs::weakly_canonical(c.path, ec) == protect) continue;
    if (policy.Spares(c.step) || best.count(c.step)) continue;
    Status st = RemoveCounted(c.path, &result);
    if (!st.ok() && first_error.ok()) first_error = st;
  }
  // Temporaries of writers that died (crash mid-checkpoint) and replaced directories.
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    int64_t step = 0, pid = 0;
    if (!ParseStepName(name, kTmpPrefix, &step, &pid) &&
        !ParseStepName(name, kTrashPrefix, &step, &pid)) {
      continue;
    }
    if (ProcessAlive(pid)) continue;
    Status st = RemoveCounted(it->path(), &result);
    if (!st.ok() && first_error.ok()) first_error = st;
  }
  if (!first_error.ok()) return first_error;
  for (const auto& p : result.removed) spdlog::info("checkpoint retention: removed {}", p);
  return result;
}

Result<std::set<int64_t>> ReadCheckpointPins(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return std::set<int64_t>();
  std::set<int64_t> steps;
  try {
    const nlohmann::json j = nlohmann::json::parse(ReadFileText(path));
    for (const auto& step : j.at("steps")) steps.insert(step.get<int64_t>());
  } catch (const nlohmann::json::exception& e) {
    return DataLoss(path + ": not a checkpoint pins file ({\"steps\": [N, ...]}): " + e.what());
  }
  return steps;
}

Status WriteCheckpointPins(const std::string& path, const std::set<int64_t>& steps) {
  const std::string tmp = path + ".tmp-" + std::to_string(getpid());
  nlohmann::json j = {{"steps", nlohmann::json(std::vector<int64_t>(steps.begin(), steps.end()))}};
  ADCTL_RETURN_IF_ERROR(WriteFileText(tmp, j.dump() + "\n"));
  ADCTL_RETURN_IF_ERROR(SyncPath(tmp, /*directory=*/false));
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    fs::remove(tmp, ec);
    return Internal("cannot write " + path + ": " + ec.message());
  }
  return SyncPath(fs::path(path).parent_path().string(), /*directory=*/true);
}

std::string CheckpointDirProblem(const std::string& root, int64_t need_bytes) {
  std::error_code ec;
  if (Status made = MakePrivateDirectories(root); !made.ok()) return made.message();
  const std::string probe = root + "/.write-probe-" + std::to_string(getpid());
  FILE* f = std::fopen(probe.c_str(), "w");
  if (f == nullptr) return root + " is not writable: " + std::strerror(errno);
  bool written = std::fputc('x', f) != EOF;
  written = std::fclose(f) == 0 && written;
  const int write_errno = errno;
  fs::remove(probe, ec);
  if (!written) return "cannot write in " + root + ": " + std::strerror(write_errno);
  const fs::space_info space = fs::space(root, ec);
  if (!ec && need_bytes > 0 && space.available < static_cast<uintmax_t>(need_bytes)) {
    char text[160];
    std::snprintf(text, sizeof(text), " has %.2f GB free; a checkpoint needs about %.2f GB",
                  space.available / 1e9, need_bytes / 1e9);
    return root + text;
  }
  return "";
}

}  // namespace adctl

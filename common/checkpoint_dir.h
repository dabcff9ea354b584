// Checkpoint directories: two-phase atomic commit, verification, and retention.
//
// Layout under a checkpoint root (a job's `checkpoint.dir`, default <job-dir>/checkpoints):
//
//   <root>/.tmp-step-00000010-<pid>/   being written (CheckpointWriter::dir())
//   <root>/step-00000010/              committed: the caller's files + manifest.json
//
// Commit protocol (resume only from *committed* checkpoints, as torchtitan's and
// Orbax's checkpointers do): fsync every file while hashing it, write manifest.json
// {format_version, step, created_unix, metadata, files: [{path, bytes, sha256}]}, fsync it and
// the directory, rename the directory to step-NNNNNNNN, fsync the root. A crash at any point
// leaves either the previous set of committed checkpoints or the new one, plus at most a
// .tmp-* directory that ApplyRetention removes once its writer's pid is gone.
//
// Thread-safety: the free functions may run concurrently on different roots; one writer per
// root at a time (only rank 0 writes). Pids are host-local: do not run retention on one host
// while another host is writing into the same root.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace adctl {

inline constexpr int64_t kCheckpointFormatVersion = 1;
inline constexpr const char* kCheckpointManifestName = "manifest.json";

// "step-00000010" (8 digits; longer numbers are printed in full).
std::string CheckpointDirName(int64_t step);

struct CheckpointFileEntry {
  std::string path;  // relative to the checkpoint directory, '/'-separated
  int64_t bytes = 0;
  std::string sha256;  // lowercase hex
};

struct CheckpointManifest {
  int64_t format_version = kCheckpointFormatVersion;
  int64_t step = 0;
  int64_t created_unix = 0;
  nlohmann::json metadata = nlohmann::json::object();  // the caller's object, stored verbatim
  std::vector<CheckpointFileEntry> files;              // sorted by path; manifest.json excluded

  int64_t TotalBytes() const;
  nlohmann::json ToJson() const;
  // DataLoss naming the bad field if `j` is not a well-formed manifest.
  static Result<CheckpointManifest> FromJson(const nlohmann::json& j);
};

// A committed checkpoint directory.
struct CheckpointInfo {
  int64_t step = 0;
  std::string path;   // <root>/step-NNNNNNNN
  int64_t bytes = 0;  // sum of the sizes of the regular files in it (manifest included)
};

class CheckpointWriter {
 public:
  // Creates <root> if needed and a fresh <root>/.tmp-step-NNNNNNNN-<pid>/ (a leftover one of
  // this name is removed first).
  static Result<CheckpointWriter> Begin(const std::string& root, int64_t step);

  CheckpointWriter(CheckpointWriter&& other) noexcept;
  CheckpointWriter& operator=(CheckpointWriter&& other) noexcept;
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;
  // Aborts (removes the temporary directory) if neither Commit nor Abort succeeded.
  ~CheckpointWriter();

  // The temporary directory to write files into (subdirectories allowed; regular files only;
  // the name manifest.json at the top is reserved).
  const std::string& dir() const { return tmp_dir_; }
  int64_t step() const { return step_; }

  // Commits as described above and returns the committed path <root>/step-NNNNNNNN. `metadata`
  // must be a JSON object (or null, stored as {}). An existing directory of the same step (e.g.
  // a corrupt one that resume skipped) is replaced. On error the temporary directory is kept
  // for inspection; the destructor or ApplyRetention removes it.
  Result<std::string> Commit(const nlohmann::json& metadata = nlohmann::json::object());
  // Removes the temporary directory. Idempotent.
  void Abort();

 private:
  CheckpointWriter(std::string root, std::string tmp_dir, int64_t step)
      : root_(std::move(root)), tmp_dir_(std::move(tmp_dir)), step_(step) {}

  std::string root_;
  std::string tmp_dir_;
  int64_t step_ = 0;
  bool done_ = false;  // committed, aborted or moved from
};

// Committed checkpoints under `root`, sorted by step (ascending). A missing root is an empty
// list. Temporary and unrelated entries are ignored.
Result<std::vector<CheckpointInfo>> ListCheckpoints(const std::string& root);

// Reads <dir>/manifest.json and checks every listed file's presence, size and sha256.
// DataLoss naming the file on a missing file, size or hash mismatch, or an unreadable or
// malformed manifest (also if the manifest's step disagrees with a step-N directory name);
// FailedPrecondition for a manifest of a newer format version.
Result<CheckpointManifest> VerifyCheckpoint(const std::string& dir);

struct VerifiedCheckpoint {
  CheckpointInfo info;
  CheckpointManifest manifest;
};

// The newest committed checkpoint that verifies; checkpoints that do not verify are logged
// (warning) and skipped. nullopt if there is none.
Result<std::optional<VerifiedCheckpoint>> LatestVerifiedCheckpoint(const std::string& root);

struct RetentionResult {
  std::vector<std::string> removed;  // paths removed (checkpoints and stale temporaries)
  int64_t bytes_freed = 0;
};

// Which committed checkpoints survive retention: the newest `keep_last` (>= 1), and any older
// one that a rule below spares.
struct RetentionPolicy {
  int64_t keep_last = 3;
  int64_t keep_every = 0;    // steps that are multiples of it (0: none)
  std::string protect_path;  // "" for none; e.g. the checkpoint the attempt resumed from
  std::set<int64_t> pinned;  // steps pinned by the user (ReadCheckpointPins)
  std::function<bool(int64_t step)> keep_step;  // e.g. validation steps; empty: none
  // The keep_best checkpoints with the lowest number under `best_metric` in their manifest's
  // metadata (e.g. "eval_loss"); checkpoints without it do not compete. Ties: the older step.
  int64_t keep_best = 0;
  std::string best_metric;
  // Whether `step` is spared by keep_every, pinned or keep_step (not by keep_last).
  bool Spares(int64_t step) const;
  // The newest `n` and nothing else.
  static RetentionPolicy KeepLast(int64_t n) {
    RetentionPolicy p;
    p.keep_last = n;
    return p;
  }
};

// Deletes the committed checkpoints `policy` does not keep. Also removes .tmp-* (and .trash-*)
// directories whose writer pid is no longer alive. Idempotent; entries that vanish meanwhile
// (a checkpoint removed by hand) are not errors. Run it after a commit, never before.
Result<RetentionResult> ApplyRetention(const std::string& root, const RetentionPolicy& policy);
// The newest `keep_last` and `protect_path` only.
Result<RetentionResult> ApplyRetention(const std::string& root, int64_t keep_last,
                                       const std::string& protect_path = "");

// The steps pinned in a pins file (JobLayout::checkpoint_pins: `{"steps": [50, 500]}`, written
// by adctld on `adctl ckpt pin|unpin`, read by rank 0's retention). No file: none. A malformed
// file is DataLoss naming it (retention then deletes nothing older than keep_last's window).
Result<std::set<int64_t>> ReadCheckpointPins(const std::string& path);
// Writes `steps` to `path` atomically (a temporary file, fsync, rename).
Status WriteCheckpointPins(const std::string& path, const std::set<int64_t>& steps);

// Why `root` cannot take a checkpoint ("" when it can): it cannot be created or written, or it
// has fewer free bytes than `need_bytes` (0: not checked). Problems of the disk, not of the run:
// retrying would fail the same way.
std::string CheckpointDirProblem(const std::string& root, int64_t need_bytes);

}  // namespace adctl

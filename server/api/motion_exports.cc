#include "server/api/motion_exports.h"

#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>

#include "common/checkpoint_dir.h"
#include "common/checkpoint_export.h"
#include "common/job_layout.h"

namespace adctl {

namespace {

namespace fs = std::filesystem;

// The regular files of `path` (itself, or the files below it), relative to `job_dir`, sorted.
Result<std::vector<ArtifactView>> FilesOf(const std::string& job_dir, const std::string& path) {
  std::vector<ArtifactView> out;
  std::error_code ec;
  const auto add = [&](const fs::path& p) {
    out.push_back({p.lexically_relative(job_dir).generic_string(), p.string(),
                   static_cast<int64_t>(fs::file_size(p, ec))});
  };
  if (fs::is_regular_file(path, ec)) {
    add(path);
  } else {
    for (fs::recursive_directory_iterator it(path, ec), end; !ec && it != end; it.increment(ec)) {
      if (it->is_regular_file(ec)) add(it->path());
    }
  }
  if (ec) return Internal(path + ": " + ec.message());
  std::sort(out.begin(), out.end(),
            [](const ArtifactView& a, const ArtifactView& b) { return a.relative < b.relative; });
  return out;
}

// The file of an export of `format` at `out` that records its GroupNorm scope.
std::string ExportedNormFile(ExportFormat format, const std::string& out) {
  switch (format) {
    case ExportFormat::kDiffusers:
      return out + "/config.json";
    case ExportFormat::kDiffusersLora:
      return out + "/" + kLoraFileName;
    case ExportFormat::kMerged:
      return out + "/" + ExportFileName(ExportFormat::kAnimateDiff);
    default:
      return out;
  }
}

}  // namespace

Result<MotionExport> MotionExports::Export(const std::string& job_id, int64_t step,
                                           const std::string& format_name, const Requester& by,
                                           const std::string& weights_name) {
  auto format = ParseExportFormat(format_name);
  if (!format.ok()) return InvalidArgument("format: " + format.status().message());
  const std::string weights = weights_name.empty() ? "raw" : weights_name;
  if (weights != "raw" && weights != "ema") {
    return InvalidArgument("weights: must be 'raw' or 'ema', got '" + weights + "'");
  }
  const bool ema = weights == "ema";
  if (step < 0) return InvalidArgument("step: must be >= 0, got " + std::to_string(step));
  auto job = queries_->GetJob(job_id, /*with_ranks=*/false);
  if (!job.ok()) return job.status();
  ADCTL_RETURN_IF_ERROR(CheckMayActOn(by, job->job, "export"));
  auto checkpoints = queries_->ListCheckpoints(job_id);
  if (!checkpoints.ok()) return checkpoints.status();

  const CheckpointView* chosen = nullptr;
  std::string committed;
  for (const CheckpointView& c : checkpoints.value()) {
    if (!c.on_disk) continue;
    committed += (committed.empty() ? "" : ", ") + std::to_string(c.step);
    if (step == 0 || c.step == step) chosen = &c;  // by step: the last one is the newest
  }
  if (committed.empty()) {
    return FailedPrecondition("job " + job_id +
                              ": no committed checkpoint to export (checkpoint.every_steps, or "
                              "the final checkpoint of a finished job)");
  }
  const JobLayout layout(job->job.job_dir);
  // Where an export of `at` goes: export/step-N/, or export/step-N-ema/ for the average.
  const auto out_of = [&](int64_t at) {
    return layout.exports_step(at) + (ema ? "-ema" : "") + "/" + ExportFileName(*format);
  };
  std::error_code ec;
  if (chosen == nullptr && step > 0 && fs::exists(out_of(step), ec)) {
    // Retention removed the checkpoint, and an export of it was written before: serve that.
    MotionExport reused;
    reused.step = step;
    reused.format = *format;
    reused.relative = fs::path(out_of(step)).lexically_relative(layout.dir()).generic_string();
    auto norm = RecordedMotionNorm(ExportedNormFile(*format, out_of(step)));
    if (!norm.ok()) return norm.status();
    reused.motion_norm = *norm;
    auto files = FilesOf(layout.dir(), out_of(step));
    if (!files.ok()) return files.status();
    reused.files = std::move(files.value());
    return reused;
  }
  if (chosen == nullptr) {
    std::string exported;  // what exports of that step exist, in any format
    for (const std::string& dir : {layout.exports_step(step), layout.exports_step(step) + "-ema"}) {
      for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
        exported += (exported.empty() ? "" : ", ") +
                    it->path().lexically_relative(layout.dir()).generic_string();
      }
      ec.clear();
    }
    return NotFound("job " + job_id + ": no committed checkpoint at step " + std::to_string(step) +
                    " (retention removed it, or it was never written: pin steps to keep with "
                    "`adctl ckpt pin`); committed steps: " +
                    committed +
                    (exported.empty() ? std::string()
                                      : "; exports of step " + std::to_string(step) +
                                            " that exist: " + exported));
  }
  if (ema && !fs::is_directory(chosen->path + "/" + kEmaCheckpointDir)) {
    return FailedPrecondition("weights: checkpoint step " + std::to_string(chosen->step) +
                              " of job " + job_id +
                              " holds no EMA average (train.ema was off when it was written)");
  }
  // The format must fit what the checkpoint holds: whole motion modules or a LoRA.
  const bool lora = fs::is_directory(chosen->path + "/" + kLoraCheckpointDir);
  if (IsLoraExportFormat(*format) != lora) {
    return FailedPrecondition("format: checkpoint step " + std::to_string(chosen->step) +
                              " of job " + job_id +
                              (lora ? " holds a LoRA, which exports as "
                                    : " holds whole motion modules, which export as ") +
                              ExportFormatsFor(lora));
  }

  std::lock_guard<std::mutex> lock(mu_);
  const std::string out = out_of(chosen->step);
  MotionExport result;
  result.step = chosen->step;
  result.format = *format;
  result.relative = fs::path(out).lexically_relative(layout.dir()).generic_string();
  if (fs::exists(out, ec)) {
    auto norm = RecordedMotionNorm(ExportedNormFile(*format, out));
    if (!norm.ok()) return norm.status();
    result.motion_norm = *norm;
  } else {
    // The whole checkpoint is verified (sizes and SHA-256 of every file) before it is exported:
    // a corrupt one is named, not converted.
    auto verified = VerifyCheckpoint(chosen->path);
    if (!verified.ok()) {
      return DataLoss("checkpoint step " + std::to_string(chosen->step) +
                      " fails verification: " + verified.status().message());
    }
    auto info =
        ExportCheckpoint(ema ? chosen->path + "/" + kEmaCheckpointDir : chosen->path, *format, out,
                         {{"adctl_step", std::to_string(chosen->step)},
                          {"adctl_job", job->job.name},
                          {"adctl_weights", weights}});
    if (!info.ok()) return info.status();
    result.motion_norm = info->motion_norm;
    result.created = true;
  }
  auto files = FilesOf(layout.dir(), out);
  if (!files.ok()) return files.status();
  result.files = std::move(files.value());
  Status noted = recorder_->AddEvent(
      job_id, job->job.attempt, "exported", "info",
      "exported by " + (by.name.empty() ? std::string("user") : by.name) + ": step " +
          std::to_string(result.step) + (ema ? " (EMA weights)" : "") + " as " +
          ExportFormatName(*format) + (result.created ? " (written to " : " (already in ") +
          result.relative + ")");
  if (!noted.ok()) spdlog::warn("job {}: the export's event: {}", job_id, noted.message());
  return result;
}

Result<std::vector<MotionExport>> MotionExports::List(const std::string& job_id) const {
  auto job = queries_->GetJob(job_id, /*with_ranks=*/false);
  if (!job.ok()) return job.status();
  const JobLayout layout(job->job.job_dir);
  const fs::path root = layout.exports();
  std::vector<MotionExport> out;
  std::error_code ec;
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    // step-N or step-N-ema; anything else there (a user's file) is not an export.
    std::string name = it->path().filename().string();
    const bool ema = name.size() > 4 && name.compare(name.size() - 4, 4, "-ema") == 0;
    if (ema) name.resize(name.size() - 4);
    if (name.rfind("step-", 0) != 0 || name.size() == 5 ||
        name.find_first_not_of("0123456789", 5) != std::string::npos || name.size() > 23) {
      continue;
    }
    const int64_t step = std::stoll(name.substr(5));
    for (ExportFormat format :
         {ExportFormat::kDiffusers, ExportFormat::kAnimateDiff, ExportFormat::kDiffusersLora,
          ExportFormat::kAnimateDiffLora, ExportFormat::kMerged}) {
      const fs::path at = it->path() / ExportFileName(format);
      std::error_code exists_ec;
      if (!fs::exists(at, exists_ec)) continue;
      MotionExport e;
      e.step = step;
      e.format = format;
      e.weights = ema ? "ema" : "raw";
      e.relative = at.lexically_relative(layout.dir()).generic_string();
      if (auto norm = RecordedMotionNorm(ExportedNormFile(format, at.string())); norm.ok()) {
        e.motion_norm = *norm;
      }
      auto files = FilesOf(layout.dir(), at.string());
      if (!files.ok()) return files.status();
      e.files = std::move(files.value());
      // The file's own modification time, read the same way on every call (a file-clock to
      // system-clock conversion through two now()s would differ by a tick between calls).
      struct stat st {};
      if (::stat(at.c_str(), &st) == 0) {
        e.created_at =
            static_cast<double>(st.st_mtim.tv_sec) + static_cast<double>(st.st_mtim.tv_nsec) / 1e9;
      }
      out.push_back(std::move(e));
    }
  }
  std::sort(out.begin(), out.end(), [](const MotionExport& a, const MotionExport& b) {
    if (a.step != b.step) return a.step > b.step;
    if (a.weights != b.weights) return a.weights > b.weights;  // "raw" before "ema"
    return std::string(ExportFormatName(a.format)) < ExportFormatName(b.format);
  });
  return out;
}

}  // namespace adctl

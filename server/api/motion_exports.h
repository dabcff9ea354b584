// `adctl export`: a job's trained motion modules in an inference tool's layout, written by
// adctld from a committed checkpoint into <job-dir>/export/step-N/ (common/motion_export.h does
// the conversion), then downloaded as artifacts (ReadArtifact, HTTP). An export that is already
// there (the worker writes the spec's export.formats at the end of a job) is reused.
// Thread-safe: one export runs at a time.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "common/motion_export.h"
#include "common/status.h"
#include "server/api/job_queries.h"
#include "server/supervisor/job_manager.h"
#include "server/supervisor/job_recorder.h"

namespace adctl {

struct MotionExport {
  int64_t step = 0;
  ExportFormat format = ExportFormat::kDiffusers;
  std::string relative;     // the export's path relative to the job directory
  std::string motion_norm;  // the GroupNorm scope it records
  std::vector<ArtifactView> files;
  bool created = false;         // false: reused
  std::string weights = "raw";  // "raw" | "ema"
  double created_at = 0;        // List: the export's modification time (unix seconds)
};

class MotionExports {
 public:
  // `recorder`: where each export's event goes (who asked, which step, written or reused).
  MotionExports(const JobQueries* queries, JobRecorder* recorder)
      : queries_(queries), recorder_(recorder) {}

  // `step` 0: the newest committed checkpoint. Errors: InvalidArgument (format), NotFound
  // (no such checkpoint, naming the committed steps), FailedPrecondition (none committed, or a
  // checkpoint without motion modules), DataLoss (the checkpoint fails verification),
  // PermissionDenied (`by` may act only on its own jobs: CheckMayActOn). `weights`: "raw" (or
  // "") the trained weights, "ema" train.ema's average (the checkpoint's ema/ folder), exported
  // to export/step-N-ema/. An export written earlier is served even when retention has removed
  // its checkpoint since; a removed step's NotFound names the exports of that step that exist.
  Result<MotionExport> Export(const std::string& job_id, int64_t step, const std::string& format,
                              const Requester& by = {}, const std::string& weights = "raw");

  // The exports under the job's export/ folder (step-N/ and step-N-ema/, each format found
  // there), newest step first, raw before ema, then by format name. Anyone who may read the job.
  Result<std::vector<MotionExport>> List(const std::string& job_id) const;

 private:
  const JobQueries* const queries_;
  JobRecorder* const recorder_;
  std::mutex mu_;  // serialises exports (they write up to gigabytes)
};

}  // namespace adctl

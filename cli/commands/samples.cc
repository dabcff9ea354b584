// adctl samples JOB: a job's validation samples (MP4 and GIF), listed or downloaded.
#include <cstdint>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>

#include "cli/commands/commands.h"
#include "cli/render.h"

namespace adctl::cli {
namespace {

using Stub = v1::JobService::Stub;

struct SamplesArgs {
  std::string job_id;
  int64_t step = 0;
  std::string download;  // a folder; "" lists only
};

int Samples(Client& c, const Context& ctx, const std::string& job_id, const SamplesArgs& a) {
  v1::ListSamplesRequest req;
  req.set_job_id(job_id);
  req.set_step(a.step);
  v1::ListSamplesResponse resp;
  if (int rc = c.Call(&Stub::ListSamples, req, &resp); rc != 0) return rc;
  if (!a.download.empty()) {
    int64_t bytes = 0;
    int files = 0;
    for (const auto& s : resp.samples()) {
      for (const std::string& rel : {s.mp4(), s.gif()}) {
        // samples/step-N/x.mp4 → <folder>/step-N/x.mp4
        const std::string inside = rel.substr(rel.find('/') + 1);
        if (int rc = Download(c, job_id, rel, std::filesystem::path(a.download) / inside, &bytes);
            rc != 0) {
          return rc;
        }
        ++files;
      }
    }
    if (!ctx.json()) {
      std::cout << "downloaded " << files << " files (" << FormatBytes(bytes) << ") to "
                << a.download << "\n";
    }
  }
  if (PrintedAsJson(ctx, resp)) return 0;
  if (!a.download.empty()) return 0;
  Table t({"STEP", "SAMPLE", "PROMPT", "MP4", "GIF", "ON DISK"});
  for (const auto& s : resp.samples()) {
    t.Add({std::to_string(s.step()), s.index() < 0 ? "grid" : std::to_string(s.index()), s.prompt(),
           s.mp4(), s.gif(), s.on_disk() ? "yes" : "no"});
  }
  std::cout << t.ToString();
  return 0;
}

}  // namespace

void RegisterSamples(CLI::App& app, Context& ctx) {
  auto a = std::make_shared<SamplesArgs>();
  auto* cmd = AddJobCommand(app, "samples", "a job's validation samples (MP4 and GIF)", &a->job_id);
  cmd->add_option("--step", a->step, "only this step");
  cmd->add_option("--download", a->download,
                  "save the files into this folder (step-N/sample-I.mp4, ...)");
  cmd->callback(ctx.Run([&ctx, a](Client& c) { return Samples(c, ctx, a->job_id, *a); }));
}

}  // namespace adctl::cli

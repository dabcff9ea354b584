// adctl export JOB and exports JOB: the trained motion modules (or LoRA) written for diffusers,
// ComfyUI or AUTOMATIC1111 and downloaded, and the exports a job has.
#include <cstdint>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands/commands.h"
#include "cli/render.h"

namespace adctl::cli {
namespace {

using Stub = v1::JobService::Stub;

struct ExportArgs {
  std::string job_id;
  int64_t step = 0;
  std::string format;
  std::string out;
  std::string weights = "raw";
};

int Export(Client& c, const Context& ctx, const std::string& job_id, const ExportArgs& a) {
  v1::ExportMotionModulesRequest req;
  req.set_job_id(job_id);
  req.set_step(a.step);
  req.set_format(a.format);
  req.set_weights(a.weights);
  v1::ExportMotionModulesResponse resp;
  // Verifying a large checkpoint and converting it takes a while.
  if (int rc = c.Call(&Stub::ExportMotionModules, req, &resp, 1800); rc != 0) return rc;
  namespace fs = std::filesystem;
  int64_t bytes = 0;
  std::vector<fs::path> written;
  for (const auto& f : resp.files()) {
    // A single file lands at --out, or inside it when --out is a folder (existing, or written
    // with a trailing '/'); a folder's files keep their place below --out.
    fs::path dest = a.out;
    std::error_code ec;
    if (f.path() != resp.path()) {
      dest /= f.path().substr(resp.path().size() + 1);
    } else if (fs::is_directory(dest, ec) || a.out.back() == '/') {
      dest /= fs::path(f.path()).filename();
    }
    if (int rc = Download(c, job_id, f.path(), dest, &bytes); rc != 0) {
      for (const fs::path& p : written) fs::remove(p, ec);  // a failed export leaves nothing
      return rc;
    }
    written.push_back(dest);
  }
  if (PrintedAsJson(ctx, resp)) return 0;
  std::cout << "exported step " << resp.step() << (a.weights == "ema" ? " (EMA weights)" : "")
            << " as " << resp.format() << " (" << resp.motion_norm() << " GroupNorm, "
            << FormatBytes(bytes) << ") to " << (written.size() == 1 ? written[0].string() : a.out)
            << "\n";
  return 0;
}

int Exports(Client& c, const Context& ctx, const std::string& job_id) {
  v1::ListExportsRequest req;
  req.set_job_id(job_id);
  v1::ListExportsResponse resp;
  if (int rc = c.Call(&Stub::ListExports, req, &resp); rc != 0) return rc;
  if (PrintedAsJson(ctx, resp)) return 0;
  Table t({"STEP", "WEIGHTS", "FORMAT", "SIZE", "FILES", "PATH"});
  for (const auto& e : resp.exports()) {
    int64_t bytes = 0;
    for (const auto& f : e.files()) bytes += f.size_bytes();
    t.Add({std::to_string(e.step()), e.weights(), e.format(), FormatBytes(bytes),
           std::to_string(e.files_size()), e.path()});
  }
  std::cout << t.ToString();
  return 0;
}

}  // namespace

void RegisterExport(CLI::App& app, Context& ctx) {
  auto a = std::make_shared<ExportArgs>();
  auto* cmd = AddJobCommand(
      app, "export",
      "save the trained motion modules (or LoRA) for diffusers, ComfyUI or AUTOMATIC1111",
      &a->job_id);
  cmd->add_option("--step", a->step, "a committed checkpoint's step (default: newest)");
  cmd->add_option("--format", a->format,
                  "diffusers (a MotionAdapter folder) or animatediff (one .safetensors file); a "
                  "LoRA job's: diffusers-lora (a folder with pytorch_lora_weights.safetensors), "
                  "animatediff-lora (one MotionLoRA file) or merged (a folder: the base motion "
                  "module with the LoRA merged in, both layouts)")
      ->required()
      ->check(CLI::IsMember(
          {"diffusers", "animatediff", "diffusers-lora", "animatediff-lora", "merged"}));
  cmd->add_option("--out", a->out,
                  "where to write it (a folder for diffusers, diffusers-lora and merged; a "
                  "file for animatediff and animatediff-lora)")
      ->required();
  cmd->add_option("--weights", a->weights,
                  "raw (the trained weights) or ema (train.ema's moving average, kept in the "
                  "checkpoint's ema/ folder)")
      ->check(CLI::IsMember({"raw", "ema"}))
      ->capture_default_str();
  cmd->callback(ctx.Run([&ctx, a](Client& c) { return Export(c, ctx, a->job_id, *a); }));

  auto exports_job_id = std::make_shared<std::string>();
  AddJobCommand(app, "exports", "a job's exports (adctl export and the spec's export:)",
                exports_job_id.get())
      ->callback(
          ctx.Run([&ctx, exports_job_id](Client& c) { return Exports(c, ctx, *exports_job_id); }));
}

}  // namespace adctl::cli

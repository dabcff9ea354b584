// adctl ckpt ls | pin | unpin: a job's checkpoints, and keeping one through retention
// (checkpoint.keep_last).
#include <cstdint>
#include <iostream>
#include <memory>
#include <string>

#include "cli/commands/commands.h"
#include "cli/render.h"

namespace adctl::cli {
namespace {

using Stub = v1::JobService::Stub;

int Checkpoints(Client& c, const Context& ctx, const std::string& job_id) {
  v1::ListCheckpointsRequest req;
  req.set_job_id(job_id);
  v1::ListCheckpointsResponse resp;
  if (int rc = c.Call(&Stub::ListCheckpoints, req, &resp); rc != 0) return rc;
  if (PrintedAsJson(ctx, resp)) return 0;
  // SAVE: the background write; STALL: the training time it took (both as rank 0 reported them).
  Table t({"STEP", "SIZE", "ON DISK", "PINNED", "ATTEMPT", "SAVE", "STALL", "PATH"});
  auto seconds = [](double s) { return s > 0 ? FormatSeconds(s) : std::string("-"); };
  for (const auto& ck : resp.checkpoints()) {
    t.Add({std::to_string(ck.step()), FormatBytes(ck.size_bytes()), ck.on_disk() ? "yes" : "no",
           ck.pinned() ? "yes" : "-", ck.attempt() ? std::to_string(ck.attempt()) : "-",
           seconds(ck.save_seconds()), seconds(ck.stall_seconds()), ck.path()});
  }
  std::cout << t.ToString();
  return 0;
}

// adctl ckpt pin|unpin JOB STEP.
int PinCheckpoint(Client& c, const Context& ctx, const std::string& job_id, int64_t step,
                  bool pin) {
  v1::PinCheckpointRequest req;
  req.set_job_id(job_id);
  req.set_step(step);
  req.set_pin(pin);
  v1::PinCheckpointResponse resp;
  if (int rc = c.Call(&Stub::PinCheckpoint, req, &resp); rc != 0) return rc;
  if (PrintedAsJson(ctx, resp)) return 0;
  std::string steps;
  for (int64_t s : resp.pinned_steps()) steps += (steps.empty() ? "" : ", ") + std::to_string(s);
  std::cout << (pin ? "pinned" : "unpinned") << " step " << step << " of " << job_id
            << "; pinned steps: " << (steps.empty() ? "none" : steps) << "\n";
  return 0;
}

struct CheckpointArgs {
  std::string job_id;
  int64_t step = 0;  // pin, unpin
};

}  // namespace

void RegisterCheckpoints(CLI::App& app, Context& ctx) {
  auto* ckpt = app.add_subcommand("ckpt", "checkpoints");
  ckpt->require_subcommand(1);
  auto ls_job_id = std::make_shared<std::string>();
  auto* ckpt_ls = ckpt->add_subcommand("ls", "list a job's checkpoints");
  ckpt_ls->add_option("JOB", *ls_job_id, "job id")->required();
  ckpt_ls->callback(
      ctx.Run([&ctx, ls_job_id](Client& c) { return Checkpoints(c, ctx, *ls_job_id); }));
  for (const bool pin : {true, false}) {
    auto a = std::make_shared<CheckpointArgs>();
    auto* cmd = ckpt->add_subcommand(
        pin ? "pin" : "unpin", pin ? "keep a checkpoint through retention (checkpoint.keep_last)"
                                   : "let retention delete a pinned checkpoint again");
    cmd->add_option("JOB", a->job_id, "job id")->required();
    cmd->add_option("STEP", a->step, "the checkpoint's step")->required();
    cmd->callback(ctx.Run(
        [&ctx, a, pin](Client& c) { return PinCheckpoint(c, ctx, a->job_id, a->step, pin); }));
  }
}

}  // namespace adctl::cli

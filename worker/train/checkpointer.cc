#include "worker/train/checkpointer.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <utility>

#include "common/checkpoint_dir.h"
#include "common/checkpoint_export.h"
#include "common/fs_util.h"
#include "common/job_layout.h"
#include "worker/model/weights.h"
#include "worker/sample/validation.h"
#include "worker/train/ema.h"

namespace adctl {

CheckpointState CheckpointContents(UNet3DImpl& model, const TrainedLora* lora, AdamW& optimizer,
                                   const TrainState& state, std::optional<double> eval_loss,
                                   Ema* ema) {
  CheckpointState c;
  c.step = state.step;
  if (lora != nullptr) {
    c.lora = lora->adapters.DiffusersTensors(/*fold_alpha=*/false);
    c.lora_metadata = lora->metadata;
    c.lora_metadata["adctl_step"] = std::to_string(state.step);
  } else {
    c.motion_adapter = MotionAdapterTensors(model);
  }
  c.motion_adapter_config = MotionAdapterConfig(model);
  c.optimizer = optimizer.StateDict();
  c.metadata = state.ToJson();
  if (eval_loss) c.metadata["eval_loss"] = *eval_loss;
  if (ema != nullptr) {
    ema->Sync();  // the saver copies the averages on the current stream
    c.metadata[kEmaUpdatesKey] = ema->updates();
    if (lora != nullptr) {
      for (const auto& [name, avg] : ema->averages()) c.ema_lora["unet." + name] = avg;
    } else {
      c.ema_motion_adapter = c.motion_adapter;  // the buffers; parameters replaced
      for (const auto& [name, avg] : ema->averages()) c.ema_motion_adapter[name] = avg;
    }
  }
  return c;
}

Checkpointer::Checkpointer(const TrainerOptions& options, std::function<CheckpointState()> current)
    : options_(options),
      spec_(options.spec),
      reporter_(*options.reporter),
      current_(std::move(current)),
      root_(JobLayout(options.job_dir).checkpoints(options.spec.checkpoint.dir)) {}

Checkpointer::~Checkpointer() = default;

std::optional<Failure> Checkpointer::CheckFolder() const {
  if (!spec_.checkpoint.enabled || options_.rank != 0) return std::nullopt;
  if (const std::string why = CheckpointDirProblem(root_, 0); !why.empty()) {
    return Failure{kExitBadSpec, "checkpoint.dir: " + why};
  }
  return std::nullopt;
}

std::optional<Failure> Checkpointer::Resume(UNet3DImpl& model, LoraAdapters* lora, AdamW& optimizer,
                                            torch::Device device, DistributedSampler& sampler,
                                            TrainState& state, Ema* ema) {
  auto latest = LatestVerifiedCheckpoint(root_);
  if (!latest.ok()) return Failure{kExitDataError, latest.status().ToString()};
  if (!latest->has_value()) {
    // Checkpoints that all fail verification: say so before starting over from step 0.
    auto listed = ListCheckpoints(root_);
    if (listed.ok() && !listed->empty() && options_.rank == 0) {
      reporter_.OnEvent(EventLevel::kWarning,
                        "none of the " + std::to_string(listed->size()) + " checkpoint(s) in " +
                            root_ + " verifies (see the rank log); training starts from step 0");
    }
    return std::nullopt;
  }
  const auto& ckpt = **latest;
  const std::string dir = ckpt.info.path;
  if (options_.rank == 0) ReportSkipped(ckpt.info.step);
  if (auto f = LoadWeights(dir, model, lora)) return f;
  auto opt = ReadTensorFile(dir + "/optimizer.safetensors");
  if (!opt.ok()) return Failure{kExitDataError, opt.status().ToString()};
  for (auto& [k, t] : *opt) t = t.to(device);
  Status st = optimizer.LoadStateDict(*opt);
  if (!st.ok()) return Failure{kExitDataError, dir + ": " + st.ToString()};
  auto saved = TrainState::FromJson(ckpt.manifest.metadata);
  if (!saved.ok()) {
    return Failure{kExitDataError, dir + "/manifest.json: " + saved.status().message()};
  }
  if (ema != nullptr) {
    const std::string ema_file =
        dir + "/" + kEmaCheckpointDir + "/" +
        (lora != nullptr ? std::string(kLoraCheckpointDir) + "/" + kLoraFileName
                         : "motion_adapter/diffusion_pytorch_model.safetensors");
    if (std::filesystem::exists(ema_file)) {
      auto averages = ReadTensorFile(ema_file);
      if (!averages.ok()) return Failure{kExitDataError, averages.status().ToString()};
      st = ema->Restore(*averages, ckpt.manifest.metadata.value(kEmaUpdatesKey, int64_t{0}),
                        lora != nullptr ? "unet." : "");
      if (!st.ok()) return Failure{kExitDataError, ema_file + ": " + st.ToString()};
    } else {
      ema->Reset();
      if (options_.rank == 0) {
        reporter_.OnEvent(EventLevel::kWarning,
                          "train.ema: checkpoint " + dir +
                              " holds no average (train.ema was added since it was written); "
                              "the average starts again from its weights");
      }
    }
  }
  state.step = saved->step;
  state.samples_seen = saved->samples_seen;
  st = sampler.Restore(saved->sampler);
  if (!st.ok()) return Failure{kExitDataError, dir + ": " + st.ToString()};
  resumed_from_ = dir;
  last_step_ = state.step;
  const int64_t world = options_.world_size;
  reporter_.OnEvent(
      EventLevel::kInfo,
      "resumed from " + dir + " at step " + std::to_string(state.step) +
          (saved->world_size != world ? " (world size " + std::to_string(saved->world_size) +
                                            " -> " + std::to_string(world) + ")"
                                      : ""));
  return std::nullopt;
}

std::optional<Failure> Checkpointer::LoadWeights(const std::string& dir, UNet3DImpl& model,
                                                 LoraAdapters* lora) {
  const std::string lora_file = dir + "/" + kLoraCheckpointDir + "/" + kLoraFileName;
  const bool holds_lora = std::filesystem::exists(lora_file);
  if ((lora != nullptr) != holds_lora) {
    return Failure{kExitModelError,
                   "checkpoint " + dir +
                       (holds_lora ? " holds a LoRA (lora/), and this job trains whole motion "
                                     "modules: model.lora was removed since it was written"
                                   : " holds whole motion modules, and this job trains a LoRA: "
                                     "model.lora was added since it was written") +
                       " (restore the spec, or submit a new job)"};
  }
  if (lora != nullptr) {
    auto tensors = ReadTensorFile(lora_file);
    if (!tensors.ok()) return Failure{kExitDataError, tensors.status().ToString()};
    auto st = lora->Restore(*tensors);
    if (!st.ok()) {
      return Failure{kExitModelError,
                     lora_file +
                         " does not fit the job's LoRA (model.lora changed since it was "
                         "written?): " +
                         st.message()};
    }
    return std::nullopt;
  }
  auto weights = ReadTensorFile(dir + "/motion_adapter/diffusion_pytorch_model.safetensors");
  if (!weights.ok()) return Failure{kExitDataError, weights.status().ToString()};
  auto st = LoadStrict(
      model, *weights,
      [](const std::string& k) { return k.find("motion_modules.") != std::string::npos; }, dir);
  if (!st.ok())
    return Failure{kExitModelError, "checkpoint does not fit the model: " + st.ToString()};
  return std::nullopt;
}

void Checkpointer::ReportSkipped(int64_t step) {
  std::string skipped;
  if (auto listed = ListCheckpoints(root_); listed.ok()) {
    for (const CheckpointInfo& c : *listed) {
      if (c.step > step) skipped += (skipped.empty() ? "" : ", ") + std::to_string(c.step);
    }
  }
  if (skipped.empty()) return;
  reporter_.OnEvent(EventLevel::kWarning,
                    "the checkpoint(s) of step " + skipped + " in " + root_ +
                        " do not verify (corrupt or incomplete; see the rank log): resuming "
                        "from the older step " +
                        std::to_string(step));
}

void Checkpointer::StartWriter(bool reserve) {
  if (!spec_.checkpoint.enabled || options_.rank != 0) return;
  RetentionPolicy retention;
  retention.keep_last = spec_.checkpoint.keep_last;
  retention.keep_every = spec_.checkpoint.keep_every;
  retention.protect_path = resumed_from_;
  if (spec_.checkpoint.keep_at_validation) {
    retention.keep_step = [v = spec_.validation](int64_t step) { return ValidationDue(v, step); };
  }
  retention.keep_best = spec_.checkpoint.keep_best.k;
  retention.best_metric = Name(spec_.checkpoint.keep_best.metric);  // the manifest key
  saver_ = std::make_unique<CheckpointSaver>(root_, std::move(retention),
                                             JobLayout(options_.job_dir).checkpoint_pins());
  if (reserve) saver_->Reserve(current_());
}

std::optional<Failure> Checkpointer::Save(int64_t step, bool wait, Communicator* comm) {
  if (!spec_.checkpoint.enabled) return std::nullopt;
  if (options_.rank == 0) {
    const auto t0 = std::chrono::steady_clock::now();
    // Never two in flight: the previous write ends (and is reported) first.
    if (auto f = Collect(/*wait=*/true)) return f;
    saver_->Start(current_());
    stall_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (wait) {
      if (auto f = Collect(/*wait=*/true)) return f;
    }
  }
  if (wait && comm != nullptr) comm->Barrier();
  last_step_ = step;
  return std::nullopt;
}

std::optional<Failure> Checkpointer::SaveFinal(int64_t step, Communicator* comm) {
  if (last_step_ != step) return Save(step, /*wait=*/true, comm);
  return Collect(/*wait=*/true);
}

std::optional<Failure> Checkpointer::Collect(bool wait) {
  if (!saver_) return std::nullopt;
  const std::optional<SavedCheckpoint> saved = wait ? saver_->Wait() : saver_->Poll();
  if (!saved) return std::nullopt;
  if (!saved->status.ok()) {
    const std::string what =
        "checkpoint step " + std::to_string(saved->step) + ": " + saved->status.ToString();
    // The disk's state says whether it was the disk: unwritable, or short of what this
    // checkpoint needs (a failed write keeps its partial files for inspection).
    const std::string why =
        CheckpointDirProblem(root_, std::max(last_bytes_, saver_->last_state_bytes()));
    if (why.empty()) return Failure{kExitCrash, what};
    return Failure{kExitStorageError, what + " (" + why + ")"};
  }
  if (!saved->retention_error.empty()) {
    reporter_.OnEvent(EventLevel::kWarning, "retention: " + saved->retention_error);
  }
  last_path_ = saved->path;
  last_bytes_ = saved->size_bytes;
  CheckpointReport report;
  report.step = saved->step;
  report.path = saved->path;
  report.size_bytes = saved->size_bytes;
  report.save_seconds = saved->write_seconds + saved->commit_seconds;
  report.stall_seconds = stall_seconds_;
  char timing[240];
  std::snprintf(timing, sizeof(timing),
                "checkpoint step %lld: %.2f GB; training paused %.2f s (copy to host %.2f s), "
                "written in the background in %.1f s (tensors to files %.1f s, sha256 + fsync + "
                "rename %.1f s)",
                static_cast<long long>(saved->step), saved->size_bytes / 1e9, stall_seconds_,
                saved->copy_seconds, report.save_seconds, saved->write_seconds,
                saved->commit_seconds);
  reporter_.OnEvent(EventLevel::kInfo, timing);
  reporter_.OnCheckpoint(report);
  return std::nullopt;
}

std::optional<Failure> Checkpointer::ExportForInferenceTools(int64_t step) {
  if (spec_.exports.formats.empty() || options_.rank != 0) return std::nullopt;
  // export.weights: ema reads the checkpoint's ema/ folder, laid out as the checkpoint itself,
  // and writes export/step-N-ema/ (where `adctl export --weights ema` looks too).
  const bool ema = spec_.exports.weights == WeightsSource::kEma;
  const std::string out_dir = JobLayout(options_.job_dir).exports_step(step) + (ema ? "-ema" : "");
  // Step `step`'s checkpoint, or the live state written beside the exports without one.
  const std::string live = out_dir + "/checkpoint.live";
  const std::string source = last_path_.empty() || last_step_ != step ? live : last_path_;
  if (source == live) {
    CheckpointState state = current_();
    state.optimizer.clear();
    std::error_code ec;
    std::filesystem::create_directories(live, ec);
    auto st = ec ? Internal(live + ": " + ec.message()) : WriteCheckpointFiles(live, state);
    if (!st.ok()) return Failure{kExitCrash, "export: " + st.ToString()};
  }
  const std::string weights = ema ? source + "/" + kEmaCheckpointDir : source;
  for (const auto& name : spec_.exports.formats) {
    auto format = ParseExportFormat(name);
    if (!format.ok()) return Failure{kExitBadSpec, format.status().ToString()};
    auto info = ExportCheckpoint(weights, *format, out_dir + "/" + ExportFileName(*format),
                                 {{"adctl_step", std::to_string(step)},
                                  {"adctl_job", spec_.name},
                                  {"adctl_weights", ema ? "ema" : "raw"}});
    if (!info.ok()) return Failure{kExitCrash, "export: " + info.status().ToString()};
    char size[48];
    std::snprintf(size, sizeof(size), "%.1f MB of tensors", info->bytes / 1e6);
    reporter_.OnEvent(
        EventLevel::kInfo,
        std::string("exported ") + name + (ema ? " of the EMA weights" : "") + " (" + size +
            (info->motion_norm.empty() ? std::string() : ", " + info->motion_norm + " GroupNorm") +
            ") → " + info->path);
  }
  if (source == live) (void)RemoveTree(live);
  return std::nullopt;
}

}  // namespace adctl

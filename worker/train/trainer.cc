#include "worker/train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "common/checkpoint_dir.h"
#include "common/clock.h"
#include "common/fs_util.h"
#include "common/job_layout.h"
#include "common/worker_contract.h"
#include "worker/compat.h"
#include "worker/data/batch_loader.h"
#include "worker/data/latent_dataset.h"
#include "worker/data/sampler.h"
#include "worker/diffusion/ddpm.h"
#include "worker/dist/communicator.h"
#include "worker/dist/directory_kv_store.h"
#include "worker/dist/gradient_reducer.h"
#include "worker/kernels/dispatch.h"
#include "worker/model/pretrained.h"
#include "worker/model/weights.h"
#include "worker/sample/validation.h"
#include "worker/train/attention_warmup.h"
#include "worker/train/checkpoint_saver.h"
#include "worker/train/optimizer.h"
#include "worker/train/startup_timer.h"
#include "worker/train/step_graph.h"
#include "worker/train/step_metrics.h"
#include "worker/train/step_profiler.h"
#include "worker/video/ffmpeg_log.h"

namespace adctl {
namespace {

namespace fs = std::filesystem;
using SteadyClock = std::chrono::steady_clock;

double Seconds(SteadyClock::time_point a, SteadyClock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// A failure with the exit code it maps to.
struct Failure {
  int exit_code;
  std::string message;
};

class Run {
 public:
  explicit Run(const TrainerOptions& o) : o_(o), spec_(o.spec), reporter_(*o.reporter) {}

  int Execute() {
    try {
      if (auto f = Setup()) return Fail(*f);
      return Train();
    } catch (const CommunicationError& e) {
      return Fail({kExitTransient, std::string("communication failed: ") + e.what()});
    } catch (const c10::Error& e) {
      return Fail({kExitCrash, std::string("torch error: ") + e.what_without_backtrace()});
    } catch (const std::exception& e) {
      return Fail({kExitCrash, std::string("error: ") + e.what()});
    }
  }

 private:
  int Fail(const Failure& f) {
    reporter_.OnEvent(EventLevel::kError, f.message);
    return f.exit_code;
  }

  std::optional<Failure> Setup() {
    device_ = compat::ComputeDevice();
    compute_dtype_ = compat::ComputeDtype(spec_.train.precision, device_);
    if (device_.is_cuda()) torch::empty({1}, device_);  // the CUDA context, timed on its own
    startup_.Mark("CUDA context");
    // cuDNN's autotuner times each convolution shape once (the first steps, before a CUDA graph
    // capture) and reuses its pick: shapes are fixed for the whole run.
    if (device_.is_cuda()) at::globalContext().setBenchmarkCuDNN(spec_.train.cudnn_benchmark);
    SetFusedKernels(spec_.train.fused_kernels);
    if (device_.is_cuda() && std::getenv("OMP_NUM_THREADS") == nullptr) {
      // A GPU rank's CPU work is drawing the next batch (on the prefetch thread). With every
      // rank of a host spinning one OpenMP thread per core, the 2-GPU machine's ranks slowed
      // each other's data preparation 20x. Split the cores between the host's ranks, at most 8
      // each (torchrun goes further and sets OMP_NUM_THREADS=1).
      const int ranks_here =
          std::max(1, o_.local_world_size > 0 ? o_.local_world_size : o_.world_size);
      const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
      torch::set_num_threads(std::clamp(cores / ranks_here, 1, 8));
    }
    metrics_.emplace(spec_, device_, o_.world_size, reporter_);
    if (const std::string why = compat::SelectAttentionKernels(spec_.train.attention);
        !why.empty()) {
      return Failure{kExitBadSpec, "train.attention: " + why};
    }
    checkpoint_root_ = JobLayout(o_.job_dir).checkpoints(spec_.checkpoint.dir);
    if (spec_.checkpoint.enabled && o_.rank == 0) {
      // Before hours of loading and training: a folder that cannot take a checkpoint is a
      // configuration error, not a crash to retry.
      if (const std::string why = CheckpointDirProblem(checkpoint_root_, 0); !why.empty()) {
        return Failure{kExitBadSpec, "checkpoint.dir: " + why};
      }
    }

    if (auto f = LoadModel()) return f;
    startup_.Mark("model");
    const auto& unet_cfg = model_->unet_config();

    auto dataset =
        OpenLatentDataset(spec_.data, unet_cfg.in_channels, unet_cfg.cross_attention_dim);
    if (!dataset.ok()) return Failure{kExitDataError, dataset.status().ToString()};
    dataset_ = std::move(*dataset);
    metrics_->SetWorkload(unet_cfg, model_->motion_config(), dataset_->shape());
    if (device_.is_cuda()) {  // compiles cuDNN's attention kernels while the set-up goes on
      const auto& shape = dataset_->shape();
      attention_warmup_ = std::make_unique<AttentionWarmup>(
          SpatialAttentionShapes(unet_cfg, spec_.train.batch_size, shape.frames, shape.height,
                                 shape.width, shape.text_len),
          device_, compute_dtype_, spec_.train.attention);
    }
    if (dataset_->shape().frames > model_->motion_config().max_seq_length) {
      return Failure{kExitBadSpec, "data: clips have " + std::to_string(dataset_->shape().frames) +
                                       " frames, the motion modules hold at most " +
                                       std::to_string(model_->motion_config().max_seq_length)};
    }
    auto fits =
        DistributedSampler::CheckFits(dataset_->size(), o_.world_size, spec_.train.batch_size);
    if (!fits.ok()) return Failure{kExitBadSpec, fits.ToString()};
    sampler_ = std::make_unique<DistributedSampler>(dataset_->size(), o_.rank, o_.world_size,
                                                    static_cast<uint64_t>(spec_.train.seed));
    if (spec_.train.caption_dropout > 0 && !dataset_->has_empty_caption()) {
      reporter_.OnEvent(EventLevel::kInfo,
                        "train.caption_dropout: the dataset stores no empty-caption text state, "
                        "so no caption is dropped");
    }
    const auto& t = spec_.train;
    SchedulerConfig sc{t.beta_schedule, t.beta_start, t.beta_end, t.num_train_timesteps,
                       t.prediction_type};
    if (t.beta_schedule == BetaSchedule::kPretrained) {
      auto read = ReadSchedulerConfig(spec_.model.pretrained);
      if (!read.ok()) return Failure{kExitModelError, read.status().ToString()};
      sc = *read;
    }
    prediction_type_ = sc.prediction_type;
    auto schedule =
        NoiseSchedule::Make(sc.beta_schedule, sc.beta_start, sc.beta_end, sc.num_train_timesteps);
    if (!schedule.ok()) return Failure{kExitBadSpec, schedule.status().ToString()};
    schedule_ = std::make_unique<NoiseSchedule>(*schedule);
    if (!spec_.validation.prompts.empty() && o_.rank == 0) {
      if (!HaveFfmpeg()) {
        return Failure{kExitBadSpec,
                       "validation.prompts: this adworker was built without FFmpeg, so it "
                       "cannot write sample videos (rebuild with libavcodec-dev, "
                       "libavformat-dev, libswscale-dev)"};
      }
      auto renderer = ValidationRenderer::Make(spec_, *model_, *schedule_, sc.prediction_type,
                                               device_, compute_dtype_, o_.job_dir);
      if (!renderer.ok()) {
        const int code = renderer.status().code() == StatusCode::kInvalidArgument ? kExitBadSpec
                                                                                  : kExitModelError;
        return Failure{code, renderer.status().ToString()};
      }
      validation_ = std::move(*renderer);
    }

    startup_.Mark("data and validation set-up");
    params_ = model_->MotionParameters();
    optimizer_ = std::make_unique<AdamW>(params_, spec_.train);
    if (auto f = Resume()) return f;
    batches_ = std::make_unique<BatchLoader>(
        BatchOptions{spec_.train.batch_size, static_cast<uint64_t>(spec_.train.seed),
                     spec_.train.caption_dropout, prediction_type_, device_, compute_dtype_},
        *dataset_, *sampler_, *schedule_);
    startup_.Mark("optimizer and resume");

    if (o_.world_size > 1) {
      KeyValueStore* store = o_.store;
      if (store == nullptr) {
        own_store_ = MakeDirectoryKeyValueStore(JobLayout(o_.job_dir).rendezvous(o_.attempt));
        store = own_store_.get();
      }
      const auto timeout = std::chrono::milliseconds(
          static_cast<int64_t>(spec_.resources.rendezvous_timeout_seconds * 1000));
      auto comm = MakeCommunicator(device_.is_cuda() ? "nccl" : "gloo", store, o_.rank,
                                   o_.world_size, timeout);
      if (!comm.ok()) {
        // A build without the backend is a configuration error, not worth a retry.
        const int code =
            comm.status().code() == StatusCode::kInvalidArgument ? kExitBadSpec : kExitTransient;
        return Failure{code, "rendezvous: " + comm.status().ToString()};
      }
      comm_ = std::move(*comm);
      ReducerOptions ro;
      ro.bucket_cap_mb = spec_.train.bucket_cap_mb;
      ro.bf16_buckets = spec_.train.bucket_dtype == BucketDtype::kBf16;
      std::vector<torch::Tensor> tensors;
      for (auto& [name, p] : params_) tensors.push_back(p);
      reducer_ = std::make_unique<GradientReducer>(comm_.get(), tensors, ro);
      reducer_->BroadcastParameters(0);
      startup_.Mark("rendezvous");
    }
    return std::nullopt;
  }

  std::optional<Failure> LoadModel() {
    const auto& m = spec_.model;
    if (m.preset != ModelPreset::kNone) {
      // Same seed on every rank: identical random weights everywhere. On a GPU the layers are
      // allocated there and initialised by its generator (seconds faster at the SD1.5 size
      // than LibTorch's CPU initialisation); on the CPU as LibTorch builds them.
      torch::manual_seed(static_cast<uint64_t>(spec_.train.seed));
      {
        std::optional<DeferredInit> deferred;
        if (device_.is_cuda()) deferred.emplace(device_);
        model_ = m.preset == ModelPreset::kSd15
                     ? UNet3D(Sd15UNetConfig(), Sd15MotionConfig(m.preset_layout))
                     : UNet3D(TinyUNetConfig(), TinyMotionConfig(m.preset_layout));
      }
      if (device_.is_cuda()) {
        model_->to(device_);
        InitializeLinearAndConv(*model_);
      }
      model_->ZeroInitMotionProjOut();
      if (m.motion_norm == MotionNorm::kPerFrame) model_->set_norm_across_frames(false);
      // The tiny preset's frozen UNet is written out so its checkpoints load as a diffusers
      // pair; sd15's random 3.4 GB are not worth the disk.
      if (o_.rank == 0 && m.preset == ModelPreset::kTiny) {
        const fs::path dir = JobLayout(o_.job_dir).preset_unet2d();
        if (!fs::exists(dir / "config.json")) {
          auto st = SaveUNet2D(*model_, dir.string());
          if (!st.ok()) return Failure{kExitCrash, st.ToString()};
        }
      }
    } else {
      ModelSources src{m.unet2d, m.motion_adapter, m.unet_motion, m.motion_module_file};
      if (!m.pretrained.empty()) {
        auto unet = PretrainedComponent(m.pretrained, "unet");
        if (!unet.ok()) return Failure{kExitModelError, unet.status().ToString()};
        src.unet2d = *unet;
      }
      auto loaded = LoadUNet3D(src, m.motion_norm);
      if (!loaded.ok()) return Failure{kExitModelError, loaded.status().ToString()};
      model_ = loaded->model;
      reporter_.OnEvent(EventLevel::kInfo,
                        "model loaded; motion modules: " + loaded->motion_format);
    }
    model_->set_gradient_checkpointing(m.gradient_checkpointing);
    model_->FreezeAllButMotionModules();
    model_->to(device_);
    // Frozen weights in the compute dtype (bf16 on GPU); motion modules stay fp32 masters.
    if (compute_dtype_ != torch::kFloat) {
      torch::NoGradGuard no_grad;
      for (auto& item : model_->named_parameters(true)) {
        if (!item.value().requires_grad()) item.value().set_data(item.value().to(compute_dtype_));
      }
    }
    // Channels-last feature maps where the fused kernels run (unet3d.h says what it saves).
    model_->set_channels_last(device_.is_cuda() && spec_.train.fused_kernels);
    return std::nullopt;
  }

  std::optional<Failure> Resume() {
    auto latest = LatestVerifiedCheckpoint(checkpoint_root_);
    if (!latest.ok()) return Failure{kExitDataError, latest.status().ToString()};
    if (!latest->has_value()) {
      // Checkpoints that all fail verification: say so before starting over from step 0.
      auto listed = ListCheckpoints(checkpoint_root_);
      if (listed.ok() && !listed->empty() && o_.rank == 0) {
        reporter_.OnEvent(EventLevel::kWarning,
                          "none of the " + std::to_string(listed->size()) + " checkpoint(s) in " +
                              checkpoint_root_ +
                              " verifies (see the rank log); training starts from step 0");
      }
      return std::nullopt;
    }
    const auto& ckpt = **latest;
    const auto& meta = ckpt.manifest.metadata;
    const std::string dir = ckpt.info.path;
    if (o_.rank == 0) {
      // Newer checkpoints that did not verify: the job's events say why it resumes further back.
      std::string skipped;
      if (auto listed = ListCheckpoints(checkpoint_root_); listed.ok()) {
        for (const CheckpointInfo& c : *listed) {
          if (c.step > ckpt.info.step)
            skipped += (skipped.empty() ? "" : ", ") + std::to_string(c.step);
        }
      }
      if (!skipped.empty()) {
        reporter_.OnEvent(EventLevel::kWarning,
                          "the checkpoint(s) of step " + skipped + " in " + checkpoint_root_ +
                              " do not verify (corrupt or incomplete; see the rank log): resuming "
                              "from the older step " +
                              std::to_string(ckpt.info.step));
      }
    }
    auto weights = ReadTensorFile(dir + "/motion_adapter/diffusion_pytorch_model.safetensors");
    if (!weights.ok()) return Failure{kExitDataError, weights.status().ToString()};
    auto st = LoadStrict(
        *model_, *weights,
        [](const std::string& k) { return k.find("motion_modules.") != std::string::npos; }, dir);
    if (!st.ok())
      return Failure{kExitModelError, "checkpoint does not fit the model: " + st.ToString()};
    auto opt = ReadTensorFile(dir + "/optimizer.safetensors");
    if (!opt.ok()) return Failure{kExitDataError, opt.status().ToString()};
    for (auto& [k, t] : *opt) t = t.to(device_);
    st = optimizer_->LoadStateDict(*opt);
    if (!st.ok()) return Failure{kExitDataError, dir + ": " + st.ToString()};
    try {
      step_ = meta.at("step").get<int64_t>();
      samples_seen_ = meta.at("samples_seen").get<int64_t>();
      st = sampler_->Restore(
          {meta.at("sampler_epoch").get<int64_t>(), meta.at("sampler_position").get<int64_t>()});
    } catch (const std::exception& e) {
      return Failure{kExitDataError, dir + "/manifest.json: bad trainer state: " + e.what()};
    }
    if (!st.ok()) return Failure{kExitDataError, dir + ": " + st.ToString()};
    resumed_from_ = dir;
    last_checkpoint_step_ = step_;
    const int64_t old_world = meta.value("world_size", int64_t{1});
    reporter_.OnEvent(
        EventLevel::kInfo,
        "resumed from " + dir + " at step " + std::to_string(step_) +
            (old_world != o_.world_size ? " (world size " + std::to_string(old_world) + " -> " +
                                              std::to_string(o_.world_size) + ")"
                                        : ""));
    return std::nullopt;
  }

  // Checkpoint of the current state. Rank 0 copies the state to host memory and writes it in
  // the background (worker/train/checkpoint_saver.h); with `wait` it also waits for the commit
  // and the other ranks wait for rank 0 at a barrier (the final and the stop checkpoints).
  // Without, training goes on during the write and the next steps collect its result
  // (CollectCheckpoint). Does nothing when checkpoints are disabled.
  std::optional<Failure> SaveCheckpoint(bool wait) {
    if (!spec_.checkpoint.enabled) return std::nullopt;
    if (o_.rank == 0) {
      const auto t0 = SteadyClock::now();
      // Never two in flight: the previous write ends (and is reported) first.
      if (auto f = CollectCheckpoint(/*wait=*/true)) return f;
      saver_->Start(CurrentState());
      checkpoint_stall_seconds_ = Seconds(t0, SteadyClock::now());
      if (wait) {
        if (auto f = CollectCheckpoint(/*wait=*/true)) return f;
      }
    }
    if (wait && comm_) comm_->Barrier();
    last_checkpoint_step_ = step_;
    return std::nullopt;
  }

  // What a checkpoint of now holds (the live tensors; the saver copies them).
  CheckpointState CurrentState() {
    // The batches consumed so far, not the one being prefetched.
    const auto sampler = batches_->consumed();
    CheckpointState state;
    state.step = step_;
    state.motion_adapter = MotionAdapterTensors(*model_);
    state.motion_adapter_config = MotionAdapterConfig(*model_);
    state.optimizer = optimizer_->StateDict();
    state.metadata = {
        {"step", step_},
        {"samples_seen", samples_seen_},
        {"sampler_epoch", sampler.epoch},
        {"sampler_position", sampler.position},
        {"world_size", o_.world_size},
        {"global_batch", spec_.train.batch_size * spec_.train.grad_accum * o_.world_size},
        {"seed", spec_.train.seed},
        {"job_name", spec_.name},
    };
    return state;
  }

  // Rank 0: reports the background checkpoint write that finished (with `wait`, waits for the
  // one in flight); a failed write fails the run. A write that fails because the disk is full
  // or read-only fails the job with that reason; anything else is a crash the restart policy
  // may retry.
  std::optional<Failure> CollectCheckpoint(bool wait) {
    if (!saver_) return std::nullopt;
    const std::optional<SavedCheckpoint> saved = wait ? saver_->Wait() : saver_->Poll();
    if (!saved) return std::nullopt;
    if (!saved->status.ok()) {
      const std::string what =
          "checkpoint step " + std::to_string(saved->step) + ": " + saved->status.ToString();
      const std::string why = CheckpointDirProblem(checkpoint_root_, last_checkpoint_bytes_);
      if (why.empty()) return Failure{kExitCrash, what};
      return Failure{kExitDataError, what + " (" + why + ")"};
    }
    if (!saved->retention_error.empty()) {
      reporter_.OnEvent(EventLevel::kWarning, "retention: " + saved->retention_error);
    }
    last_checkpoint_path_ = saved->path;
    last_checkpoint_bytes_ = saved->size_bytes;
    CheckpointReport report;
    report.step = saved->step;
    report.path = saved->path;
    report.size_bytes = saved->size_bytes;
    report.save_seconds = saved->write_seconds + saved->commit_seconds;
    report.stall_seconds = checkpoint_stall_seconds_;
    char timing[240];
    std::snprintf(timing, sizeof(timing),
                  "checkpoint step %lld: %.2f GB; training paused %.2f s (copy to host %.2f s), "
                  "written in the background in %.1f s (tensors to files %.1f s, sha256 + fsync + "
                  "rename %.1f s)",
                  static_cast<long long>(saved->step), saved->size_bytes / 1e9,
                  checkpoint_stall_seconds_, saved->copy_seconds, report.save_seconds,
                  saved->write_seconds, saved->commit_seconds);
    reporter_.OnEvent(EventLevel::kInfo, timing);
    reporter_.OnCheckpoint(report);
    return std::nullopt;
  }

  bool LocalStopRequested() {
    return (o_.stop_flag != nullptr && o_.stop_flag->load()) || reporter_.StopRequested();
  }

  // Whether any rank was asked to stop (one small all-reduce); every rank gets the same answer.
  bool StopAgreed() {
    const bool local = LocalStopRequested();
    if (!comm_) return local;
    auto flag =
        torch::tensor({local ? 1.0f : 0.0f}, torch::TensorOptions().device(comm_->device()));
    comm_->AllReduceSumAsync(flag)->Wait();
    return flag.item<float>() > 0;
  }

  // Checkpoints unless the last step already has one (then waits for its write), and ends
  // the run as preempted.
  int StopAfterCheckpoint() {
    if (last_checkpoint_step_ != step_) {
      if (auto f = SaveCheckpoint(/*wait=*/true)) return Fail(*f);
    } else if (auto f = CollectCheckpoint(/*wait=*/true)) {
      return Fail(*f);
    }
    reporter_.OnEvent(EventLevel::kInfo,
                      "stopped at step " + std::to_string(step_) +
                          (spec_.checkpoint.enabled ? " after checkpoint"
                                                    : " (checkpoints disabled: nothing saved)"));
    return kExitStopped;
  }

  int Train() {
    const auto& t = spec_.train;
    const int64_t accum = t.grad_accum;
    const int64_t global_batch = t.batch_size * accum * o_.world_size;
    if (spec_.checkpoint.enabled && o_.rank == 0) {
      saver_ = std::make_unique<CheckpointSaver>(checkpoint_root_, spec_.checkpoint.keep_last,
                                                 resumed_from_);
      // Pinning gigabytes of host memory takes a while: done meanwhile, not at the first save.
      if (device_.is_cuda()) saver_->Reserve(CurrentState());
    }
    if (t.cuda_graphs) {
      if (!device_.is_cuda() || !StepGraph::Available()) {
        reporter_.OnEvent(EventLevel::kInfo,
                          "train.cuda_graphs: needs a GPU and LibTorch 2.x; training runs without");
      } else if (o_.world_size > 1) {
        reporter_.OnEvent(EventLevel::kInfo,
                          "train.cuda_graphs: only for one rank; training runs without");
      } else {
        // Two eager steps first (cuDNN and cuBLAS choose their algorithms), then the capture.
        step_graph_ = std::make_unique<StepGraph>(
            [this](const torch::Tensor& noisy, const torch::Tensor& timesteps,
                   const torch::Tensor& text, const torch::Tensor& target) {
              return MicroStep(noisy, timesteps, text, target);
            },
            static_cast<int>(2 * accum));
      }
    }
    std::string profile_message;
    profiler_ = StepProfiler::FromEnvironment(o_.rank, &profile_message);
    if (!profile_message.empty()) reporter_.OnEvent(EventLevel::kInfo, profile_message);
    if (attention_warmup_ && attention_warmup_->started() > 0) {
      const size_t started = attention_warmup_->started();
      const int compiled = attention_warmup_->Wait();
      startup_.Mark("waiting for cuDNN's attention kernels");
      reporter_.OnEvent(EventLevel::kInfo,
                        "cuDNN attention: kernels for " + std::to_string(compiled) + " of " +
                            std::to_string(started) + " shapes compiled while the rank set up");
    }
    attention_warmup_.reset();
    if (o_.stop_watched != nullptr) o_.stop_watched->store(true);
    reporter_.OnTrainingStarted(step_, t.max_steps);
    model_->train();
    // Afterwards the stop agreement rides on each step's single all-reduce of its numbers.
    bool stop = StopAgreed();
    auto last_step_end = SteadyClock::now();
    while (step_ < t.max_steps) {
      // One rank decides alone; several agree through the previous step's all-reduce.
      if (stop || (!comm_ && LocalStopRequested())) return StopAfterCheckpoint();
      if (profiler_) profiler_->BeforeStep(step_ + 1);
      double data_wait = 0;
      torch::Tensor loss_sum;  // on the device: one host sync per step, not per micro-step
      for (int64_t micro = 0; micro < accum; ++micro) {
        const auto d0 = SteadyClock::now();
        auto batch = batches_->Next();
        data_wait += Seconds(d0, SteadyClock::now());
        if (reducer_) reducer_->PrepareForBackward(micro == accum - 1);
        const auto loss =
            step_graph_ ? step_graph_->Run(batch.noisy, batch.timesteps, batch.text, batch.target)
                        : MicroStep(batch.noisy, batch.timesteps, batch.text, batch.target);
        loss_sum = loss_sum.defined() ? loss_sum + loss : loss;
      }
      if (reducer_) reducer_->FinishBackward();
      const auto grad_norm = optimizer_->ClipGradNorm(t.max_grad_norm);
      const double lr = LearningRate(t, step_);
      optimizer_->Step(lr);
      // Released unless something holds on to the gradient tensors (the all-reduce buckets'
      // views, the captured graph's buffers).
      optimizer_->ZeroGrad(/*release=*/!reducer_ && !step_graph_);
      // The step's numbers in one tensor: [loss, grad norm, stop votes], summed over ranks in
      // one all-reduce and read with the step's only host sync. (The grad norm is the same on
      // every rank after the gradient all-reduce.)
      auto numbers =
          torch::stack({loss_sum.reshape({}), grad_norm.reshape({}),
                        torch::full({}, LocalStopRequested() ? 1.0f : 0.0f, loss_sum.options())});
      if (comm_) comm_->AllReduceSumAsync(numbers)->Wait();
      const auto host = numbers.to(torch::kCPU, torch::kDouble);
      const double loss_value = host[0].item<double>() / o_.world_size;
      const double grad_norm_value = host[1].item<double>() / o_.world_size;
      stop = host[2].item<double>() > 0;
      ++step_;
      samples_seen_ += global_batch;
      if (profiler_) {
        if (auto written = profiler_->AfterStep(step_)) {
          reporter_.OnEvent(EventLevel::kInfo, *written);
        }
      }
      // Wall time since the previous step ended: everything the loop does per step counts.
      const auto step_end = SteadyClock::now();
      const double step_seconds = Seconds(last_step_end, step_end);
      last_step_end = step_end;
      if (auto f = CollectCheckpoint(/*wait=*/false)) return Fail(*f);
      if (step_graph_ && step_graph_->captured() && !graph_reported_) {
        reporter_.OnEvent(EventLevel::kInfo,
                          "train.cuda_graphs: step " + std::to_string(step_) +
                              " captured as a CUDA graph; later steps replay it");
        graph_reported_ = true;
      }
      if (!startup_reported_) {
        startup_.Mark("rest of the first step");
        reporter_.OnEvent(EventLevel::kInfo, startup_.Summary());
        startup_reported_ = true;
      }
      if (!std::isfinite(loss_value)) {
        return Fail({kExitCrash, "loss is " + std::to_string(loss_value) + " at step " +
                                     std::to_string(step_)});
      }
      if (metrics_->Due(step_)) {
        StepReport r;
        r.step = step_;
        r.loss = loss_value;
        r.learning_rate = lr;
        r.grad_norm = grad_norm_value;
        r.step_seconds = step_seconds;
        r.data_wait_seconds = data_wait;
        r.allreduce_exposed_seconds = reducer_ ? reducer_->last_exposed_allreduce_seconds() : 0;
        r.samples_seen = samples_seen_;
        metrics_->Report(r);
      }
      // Every rank gets the same answer (same spec, same step).
      if (ValidationDue(spec_.validation, step_)) {
        if (auto f = RenderValidation()) return Fail(*f);
        last_step_end = SteadyClock::now();  // the next step's time does not include the render
      }
      if (spec_.checkpoint.every_steps > 0 && step_ % spec_.checkpoint.every_steps == 0 &&
          step_ < t.max_steps && !stop) {
        if (auto f = SaveCheckpoint(/*wait=*/false)) return Fail(*f);
        last_step_end = SteadyClock::now();  // the next step's time does not include the save
      }
    }
    if (last_checkpoint_step_ != step_) {
      if (auto f = SaveCheckpoint(/*wait=*/true)) return Fail(*f);
    } else if (auto f = CollectCheckpoint(/*wait=*/true)) {
      return Fail(*f);
    }
    if (auto f = ExportForInferenceTools()) return Fail(*f);
    reporter_.OnEvent(EventLevel::kInfo, "training finished at step " + std::to_string(step_));
    return kExitOk;
  }

  void MarkStartup(const char* phase) {
    if (device_.is_cuda()) torch::cuda::synchronize();
    startup_.Mark(phase);
  }

  // One micro-step's forward, loss and backward; returns the loss (detached), scaled for
  // accumulation.
  torch::Tensor MicroStep(const torch::Tensor& noisy, const torch::Tensor& timesteps,
                          const torch::Tensor& text, const torch::Tensor& target) {
    // The run's first forward and backward are timed apart, each waited for on the device: the
    // start-up report says where a fresh process's first step goes.
    const bool timed = !first_micro_step_timed_;
    first_micro_step_timed_ = true;
    auto pred = model_->forward(noisy, timesteps, text);
    auto loss = torch::mse_loss(pred.to(torch::kFloat), target) /
                static_cast<double>(spec_.train.grad_accum);
    if (timed) MarkStartup("first forward");
    loss.backward();
    if (timed) MarkStartup("first backward");
    return loss.detach();
  }

  // Rank 0 renders the validation prompts with the current motion modules; the other ranks
  // wait at a barrier meanwhile (its timeout is the communicator's operation timeout).
  std::optional<Failure> RenderValidation() {
    if (validation_) {
      auto rendered = validation_->Render(*model_, step_);
      if (!rendered.ok()) return Failure{kExitCrash, "validation: " + rendered.status().ToString()};
      // Paths relative to the job directory: what adctld records and serves.
      const auto relative = [&](const std::string& path) {
        return std::filesystem::path(path).lexically_relative(o_.job_dir).generic_string();
      };
      SamplesReport report{step_, rendered->seconds, rendered->dir, {}};
      for (const RenderedSample& s : rendered->samples) {
        report.files.push_back({s.index, s.prompt, relative(s.mp4), relative(s.gif)});
      }
      report.files.push_back({-1, "", relative(rendered->grid_mp4), relative(rendered->grid_gif)});
      reporter_.OnSamples(report);
    }
    if (comm_) comm_->Barrier();
    return std::nullopt;
  }

  // export.formats: rank 0 writes the final motion modules for the inference tools into
  // <job-dir>/export/step-N/, from the final checkpoint (or the live model without one).
  std::optional<Failure> ExportForInferenceTools() {
    if (spec_.exports.formats.empty() || o_.rank != 0) return std::nullopt;
    const std::string out_dir = JobLayout(o_.job_dir).exports_step(step_);
    std::string adapter = last_checkpoint_path_.empty() || last_checkpoint_step_ != step_
                              ? out_dir + "/motion_adapter.live"
                              : last_checkpoint_path_ + "/motion_adapter";
    if (adapter == out_dir + "/motion_adapter.live") {
      auto st = SaveMotionAdapter(*model_, adapter);
      if (!st.ok()) return Failure{kExitCrash, "export: " + st.ToString()};
    }
    for (const auto& name : spec_.exports.formats) {
      auto format = ParseExportFormat(name);
      if (!format.ok()) return Failure{kExitBadSpec, format.status().ToString()};
      auto info =
          ExportMotionModules(adapter, *format, out_dir + "/" + ExportFileName(*format),
                              {{"adctl_step", std::to_string(step_)}, {"adctl_job", spec_.name}});
      if (!info.ok()) return Failure{kExitCrash, "export: " + info.status().ToString()};
      reporter_.OnEvent(EventLevel::kInfo, std::string("exported ") + name + " (" +
                                               info->motion_norm + " GroupNorm) → " + info->path);
    }
    if (adapter == out_dir + "/motion_adapter.live") (void)RemoveTree(adapter);
    return std::nullopt;
  }

  const TrainerOptions& o_;
  const JobSpec& spec_;
  Reporter& reporter_;
  torch::Device device_{torch::kCPU};
  torch::ScalarType compute_dtype_ = torch::kFloat;
  PredictionType prediction_type_ = PredictionType::kEpsilon;  // the schedule's
  std::string checkpoint_root_;
  std::string resumed_from_;
  UNet3D model_{nullptr};
  std::unique_ptr<LatentDataset> dataset_;
  std::unique_ptr<DistributedSampler> sampler_;
  std::unique_ptr<NoiseSchedule> schedule_;
  std::vector<std::pair<std::string, torch::Tensor>> params_;
  std::unique_ptr<AdamW> optimizer_;
  std::unique_ptr<KeyValueStore> own_store_;
  std::unique_ptr<Communicator> comm_;
  std::unique_ptr<GradientReducer> reducer_;
  std::optional<StepMetrics> metrics_;              // set by Setup
  std::unique_ptr<ValidationRenderer> validation_;  // rank 0, when validation.prompts is set
  std::string last_checkpoint_path_;
  std::unique_ptr<BatchLoader> batches_;  // after the dataset, sampler and schedule it reads
  int64_t step_ = 0;
  int64_t samples_seen_ = 0;
  int64_t last_checkpoint_step_ = -1;
  int64_t last_checkpoint_bytes_ = 0;    // the size of the last one written, for free-space checks
  double checkpoint_stall_seconds_ = 0;  // training time the last checkpoint took
  StartupTimer startup_;
  bool startup_reported_ = false;
  bool first_micro_step_timed_ = false;
  std::unique_ptr<AttentionWarmup> attention_warmup_;
  bool graph_reported_ = false;
  std::unique_ptr<CheckpointSaver> saver_;  // rank 0, when checkpoints are enabled
  std::unique_ptr<StepGraph> step_graph_;   // train.cuda_graphs on one GPU
  std::unique_ptr<StepProfiler> profiler_;  // ADCTL_PROFILE_STEPS (benchmarks)
};

}  // namespace

int RunTrainer(const TrainerOptions& options) { return Run(options).Execute(); }

}  // namespace adctl

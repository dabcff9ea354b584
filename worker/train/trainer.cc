// The Trainer builds a rank's parts in order (device, model, data, noise schedule, validation,
// optimizer, resume, data parallelism), then runs the step loop over them. Each part has a file
// of its own: worker/train/{rank_device, training_model, lora_training, evaluator,
// training_validation, optimizer, ema, nan_rollback, checkpointer, data_parallel, step_metrics,
// startup_timer, train_state, step_graph, step_profiler}.h and worker/data/batch_loader.h.
// Errors: one convention. The parts that own an exit code return std::optional<Failure>
// (common/worker_contract.h), the libraries below them Status; the trainer maps a Status to the
// exit code of the part that called it, and Run() reports the failure.
#include "worker/train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>

#include "common/worker_contract.h"
#include "worker/data/batch_loader.h"
#include "worker/data/latent_dataset.h"
#include "worker/data/sampler.h"
#include "worker/data/sources.h"
#include "worker/diffusion/ddpm.h"
#include "worker/model/pretrained.h"
#include "worker/train/attention_warmup.h"
#include "worker/train/checkpointer.h"
#include "worker/train/data_parallel.h"
#include "worker/train/ema.h"
#include "worker/train/evaluator.h"
#include "worker/train/lora_training.h"
#include "worker/train/nan_rollback.h"
#include "worker/train/optimizer.h"
#include "worker/train/rank_device.h"
#include "worker/train/startup_timer.h"
#include "worker/train/step_graph.h"
#include "worker/train/step_metrics.h"
#include "worker/train/step_profiler.h"
#include "worker/train/train_state.h"
#include "worker/train/training_model.h"
#include "worker/train/training_validation.h"

namespace adctl {
namespace {

using SteadyClock = std::chrono::steady_clock;

double Seconds(SteadyClock::time_point a, SteadyClock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

class Trainer {
 public:
  explicit Trainer(const TrainerOptions& o) : o_(o), spec_(o.spec), reporter_(*o.reporter) {
    state_.world_size = o.world_size;
    state_.global_batch = spec_.train.batch_size * spec_.train.grad_accum * o.world_size;
    state_.seed = spec_.train.seed;
    state_.job_name = spec_.name;
  }

  int Run() {
    try {
      if (auto f = Build()) return Fail(*f);
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

  std::optional<Failure> Build() {
    if (auto f = BuildDevice()) return f;
    if (auto f = BuildModel()) return f;
    startup_.Mark("model");
    if (auto f = BuildData()) return f;
    if (auto f = BuildNoiseSchedule()) return f;
    if (auto f =
            validation_.Build(o_, *model_, *schedule_, prediction_type_, device_, compute_dtype_))
      return f;
    if (eval_clips_) {
      evaluator_ = std::make_unique<Evaluator>(eval_clips_, spec_.eval, *schedule_,
                                               prediction_type_, device_, compute_dtype_);
    }
    startup_.Mark("data and validation set-up");
    BuildOptimizer();
    if (auto f = rollback_.Read(reporter_)) return f;
    if (auto f = checkpoints_.Resume(*model_, lora_ ? &lora_->adapters : nullptr, *optimizer_,
                                     device_, *sampler_, state_, ema_.get()))
      return f;
    batches_ = std::make_unique<BatchLoader>(
        BatchOptions{spec_.train.batch_size, static_cast<uint64_t>(spec_.train.seed),
                     spec_.train.caption_dropout, prediction_type_, device_, compute_dtype_},
        *dataset_, *sampler_, *schedule_);
    startup_.Mark("optimizer and resume");
    return BuildDataParallel();
  }

  // The device (rank_device.h), the step metrics; and whether the checkpoint folder can take
  // a checkpoint, before hours of loading and training.
  std::optional<Failure> BuildDevice() {
    RankDevice d;
    if (auto f = SetUpRankDevice(o_, startup_, d)) return f;
    device_ = d.device;
    compute_dtype_ = d.compute_dtype;
    metrics_.emplace(spec_, device_, o_.world_size, reporter_);
    return checkpoints_.CheckFolder();
  }

  // The UNet with trainable fp32 motion modules (worker/train/training_model.h), or for a
  // LoRA job the frozen UNet with trainable adapters.
  std::optional<Failure> BuildModel() {
    if (auto f = BuildTrainingModel(o_, device_, compute_dtype_, model_)) return f;
    if (!spec_.model.lora.enabled()) return std::nullopt;
    return AttachTrainedLora(o_, *model_, reporter_, lora_);
  }

  // AdamW over what trains: the motion modules (their fp32 masters), or a LoRA's adapters.
  void BuildOptimizer() {
    params_ = lora_ ? lora_->adapters.Parameters() : model_->MotionParameters();
    optimizer_ = std::make_unique<AdamW>(params_, spec_.train);
    if (spec_.train.ema.enabled()) ema_ = std::make_unique<Ema>(spec_.train.ema, params_);
  }

  // The dataset and this rank's sampler over it.
  std::optional<Failure> BuildData() {
    const auto& unet_cfg = model_->unet_config();
    bool spec_error = false;
    auto data =
        OpenTrainingData(spec_, unet_cfg.in_channels, unet_cfg.cross_attention_dim, &spec_error);
    if (!data.ok()) {
      return Failure{spec_error ? kExitBadSpec : kExitDataError,
                     spec_error ? data.status().message() : data.status().ToString()};
    }
    dataset_ = data->train;
    eval_clips_ = data->eval;
    if (!data->description.empty())
      reporter_.OnEvent(EventLevel::kInfo, "data: " + data->description);
    // Every shape bucket's: MFU, cuDNN's attention kernels, the motion modules' frame limit.
    std::vector<LatentShape> buckets;
    std::vector<AttentionShape> attention;
    for (int b = 0; b < dataset_->buckets(); ++b) {
      const LatentShape& shape = dataset_->bucket_shape(b);
      buckets.push_back(shape);
      for (const AttentionShape& a :
           SpatialAttentionShapes(unet_cfg, spec_.train.batch_size, shape.frames, shape.height,
                                  shape.width, shape.text_len)) {
        if (std::find(attention.begin(), attention.end(), a) == attention.end())
          attention.push_back(a);
      }
    }
    metrics_->SetWorkload(unet_cfg, model_->motion_config(), buckets);
    if (device_.is_cuda()) {  // compiles cuDNN's attention kernels while the set-up goes on
      attention_warmup_ = std::make_unique<AttentionWarmup>(std::move(attention), device_,
                                                            compute_dtype_, spec_.train.attention);
    }
    const int64_t max_frames = model_->motion_config().max_seq_length;
    for (const auto* clips : {dataset_.get(), eval_clips_.get()}) {
      for (int b = 0; clips != nullptr && b < clips->buckets(); ++b) {
        const int64_t frames = clips->bucket_shape(b).frames;
        if (frames > max_frames) {
          return Failure{kExitBadSpec, std::string(clips == dataset_.get() ? "data" : "eval") +
                                           ": clips have " + std::to_string(frames) +
                                           " frames, the motion modules hold at most " +
                                           std::to_string(max_frames) +
                                           " (model.motion_max_frames extends them)"};
        }
      }
    }
    // One bucket: the sampler's plain rule.
    sampler_ = std::make_unique<DistributedSampler>(ClipBuckets(*dataset_), o_.rank, o_.world_size,
                                                    static_cast<uint64_t>(spec_.train.seed));
    auto fits = DistributedSampler::CheckFits(sampler_->bucket_sizes(), o_.world_size,
                                              spec_.train.batch_size);
    if (!fits.ok()) return Failure{kExitBadSpec, fits.ToString()};
    if (dataset_->buckets() > 1) reporter_.OnEvent(EventLevel::kInfo, DescribeBuckets());
    if (spec_.train.caption_dropout > 0 && !dataset_->has_empty_caption()) {
      reporter_.OnEvent(EventLevel::kInfo,
                        "train.caption_dropout: the dataset stores no empty-caption text state, "
                        "so no caption is dropped");
    }
    return std::nullopt;
  }

  // "data: 2 shape buckets (frames x latent height x width), each batch of one: 16x64x64 (120
  // clips, 15 global batches an epoch), 24x48x80 (...)", naming those too small for a batch.
  std::string DescribeBuckets() const {
    const int64_t global = spec_.train.batch_size * o_.world_size;
    std::string out = "data: " + std::to_string(dataset_->buckets()) +
                      " shape buckets (frames x latent height x width), each batch of one:";
    for (int b = 0; b < dataset_->buckets(); ++b) {
      const int64_t clips = sampler_->bucket_sizes()[static_cast<size_t>(b)];
      out += std::string(b ? "," : "") + " " + BucketName(dataset_->bucket_shape(b)) + " (" +
             std::to_string(clips) + " clips, " +
             (clips >= global
                  ? std::to_string(clips / global) + " global batches an epoch)"
                  : "fewer than a global batch of " + std::to_string(global) + ": never drawn)");
    }
    return out;
  }

  // The spec's noise schedule, or model.pretrained's (train.beta_schedule: pretrained).
  std::optional<Failure> BuildNoiseSchedule() {
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
    return std::nullopt;
  }

  // With several ranks: the rendezvous, communicator and gradient reducer (data_parallel.h).
  std::optional<Failure> BuildDataParallel() {
    if (auto f = ConnectDataParallel(o_, device_, params_, parallel_)) return f;
    if (parallel_.comm) startup_.Mark("rendezvous");
    return std::nullopt;
  }

  // What a checkpoint of now holds: the batches consumed so far, not the one being prefetched.
  CheckpointState CurrentState() {
    state_.sampler = batches_->consumed();
    return CheckpointContents(
        *model_, lora_ ? &*lora_ : nullptr, *optimizer_, state_,
        last_eval_.first == state_.step ? std::optional<double>(last_eval_.second) : std::nullopt,
        ema_.get());
  }

  bool LocalStopRequested() {
    return (o_.stop_flag != nullptr && o_.stop_flag->load()) || reporter_.StopRequested();
  }

  // Checkpoints unless the last step already has one (then waits for its write), and ends
  // the run as preempted.
  int StopAfterCheckpoint() {
    if (auto f = checkpoints_.SaveFinal(state_.step, parallel_.comm.get())) return Fail(*f);
    reporter_.OnEvent(EventLevel::kInfo,
                      "stopped at step " + std::to_string(state_.step) +
                          (spec_.checkpoint.enabled ? " after checkpoint"
                                                    : " (checkpoints disabled: nothing saved)"));
    return kExitStopped;
  }

  // The step loop: a stop request ends it with a checkpoint, max_steps with the final one.
  int Train() {
    PrepareLoop();
    reporter_.OnTrainingStarted(state_.step, spec_.train.max_steps);
    model_->train();
    // Whether any rank was asked to stop, the same answer everywhere; afterwards the agreement
    // rides on each step's single all-reduce of its numbers.
    bool stop =
        parallel_.comm ? AnyRank(*parallel_.comm, LocalStopRequested()) : LocalStopRequested();
    auto last_step_end = SteadyClock::now();
    while (state_.step < spec_.train.max_steps) {
      // One rank decides alone; several agree through the previous step's all-reduce.
      if (stop || (!parallel_.comm && LocalStopRequested())) return StopAfterCheckpoint();
      if (profiler_) profiler_->BeforeStep(state_.step + 1);
      StepReport r = TrainStep(stop);
      if (profiler_) {
        if (auto written = profiler_->AfterStep(state_.step)) {
          reporter_.OnEvent(EventLevel::kInfo, *written);
        }
      }
      // Wall time since the previous step ended: everything the loop does per step counts.
      const auto step_end = SteadyClock::now();
      r.step_seconds = Seconds(last_step_end, step_end);
      last_step_end = step_end;
      if (auto f = checkpoints_.Collect(/*wait=*/false)) return Fail(*f);
      ReportFirstSteps();
      if (!std::isfinite(r.loss) || !std::isfinite(r.grad_norm))
        return Fail(rollback_.NotFinite(state_.step, r.loss, r.grad_norm, params_));
      // Every rank evaluates at the same steps (same spec); the report carries the result.
      const bool evaluated = EvalDue(state_.step);
      if (evaluated) {
        const EvalLoss e =
            evaluator_->RunAtStep(*model_, state_.step, ema_.get(), parallel_.comm.get(), o_.rank,
                                  o_.world_size, reporter_);
        r.eval_loss = e.loss;
        r.eval_by_timestep = e.by_timestep;
        last_eval_ = {state_.step, e.loss};
        last_step_end = SteadyClock::now();  // the next step's time does not include the eval
      }
      if (metrics_->Due(state_.step) || r.eval_loss >= 0) metrics_->Report(r, step_buckets_);
      // Every rank gets the same answer (same spec, same step).
      const bool validation = ValidationDue(spec_.validation, state_.step);
      if (validation) {
        if (auto f = validation_.Render(*model_, state_.step, ema_.get(), reporter_,
                                        parallel_.comm.get()))
          return Fail(*f);
        last_step_end = SteadyClock::now();  // the next step's time does not include the render
      }
      // checkpoint.keep_at_validation and keep_best: the weights behind a sample or an eval
      // loss may be kept, so they are written even when every_steps misses the step.
      const auto& c = spec_.checkpoint;
      const bool save = (c.every_steps > 0 && state_.step % c.every_steps == 0) ||
                        (c.keep_at_validation && validation) || (c.keep_best.k > 0 && evaluated);
      if (save && state_.step < spec_.train.max_steps && !stop) {
        if (auto f = checkpoints_.Save(state_.step, /*wait=*/false, parallel_.comm.get()))
          return Fail(*f);
        last_step_end = SteadyClock::now();  // the next step's time does not include the save
      }
    }
    if (auto f = checkpoints_.SaveFinal(state_.step, parallel_.comm.get())) return Fail(*f);
    if (auto f = checkpoints_.ExportForInferenceTools(state_.step)) return Fail(*f);
    reporter_.OnEvent(EventLevel::kInfo,
                      "training finished at step " + std::to_string(state_.step));
    return kExitOk;
  }

  // What the loop needs beside the built parts: the checkpoint writer (rank 0), the CUDA graph
  // of a step, the profiler, and cuDNN's attention kernels compiled during the set-up.
  void PrepareLoop() {
    const auto& t = spec_.train;
    checkpoints_.StartWriter(/*reserve=*/device_.is_cuda());
    if (t.cuda_graphs) {
      if (const auto why = StepGraph::Unavailable(device_.is_cuda(), o_.world_size); !why.empty()) {
        reporter_.OnEvent(EventLevel::kInfo,
                          "train.cuda_graphs: " + why + "; training runs without");
      } else {
        // Two eager steps first (cuDNN and cuBLAS choose their algorithms), then the capture.
        step_graph_ = std::make_unique<StepGraph>(
            [this](const torch::Tensor& noisy, const torch::Tensor& timesteps,
                   const torch::Tensor& text, const torch::Tensor& target) {
              return MicroStep(noisy, timesteps, text, target);
            },
            static_cast<int>(2 * t.grad_accum));
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
  }

  // One optimizer step over grad_accum micro-batches. Returns the step's report without its
  // time; `stop` gets whether any rank asked to stop.
  StepReport TrainStep(bool& stop) {
    const auto& t = spec_.train;
    const int64_t accum = t.grad_accum;
    StepReport r;
    step_buckets_.clear();
    torch::Tensor loss_sum;  // on the device: one host sync per step, not per micro-step
    for (int64_t micro = 0; micro < accum; ++micro) {
      const auto d0 = SteadyClock::now();
      auto batch = batches_->Next();
      r.data_wait_seconds += Seconds(d0, SteadyClock::now());
      step_buckets_.push_back(batch.bucket);
      if (parallel_.reducer) parallel_.reducer->PrepareForBackward(micro == accum - 1);
      const auto loss =
          step_graph_ ? step_graph_->Run(batch.noisy, batch.timesteps, batch.text, batch.target)
                      : MicroStep(batch.noisy, batch.timesteps, batch.text, batch.target);
      loss_sum = loss_sum.defined() ? loss_sum + loss : loss;
    }
    if (parallel_.reducer) parallel_.reducer->FinishBackward();
    const auto grad_norm = optimizer_->ClipGradNorm(t.max_grad_norm);
    r.learning_rate = LearningRate(t, state_.step) * rollback_.lr_scale();
    if (ema_) ema_->Sync();  // its last update read the weights this step changes
    optimizer_->Step(r.learning_rate);
    // Released unless something holds on to the gradient tensors (the all-reduce buckets'
    // views, the captured graph's buffers).
    optimizer_->ZeroGrad(/*release=*/!parallel_.reducer && !step_graph_);
    // The step's numbers in one tensor: [loss, grad norm, stop votes], summed over ranks in
    // one all-reduce and read with the step's only host sync. (The grad norm is the same on
    // every rank after the gradient all-reduce.)
    auto numbers =
        torch::stack({loss_sum.reshape({}), grad_norm.reshape({}),
                      torch::full({}, LocalStopRequested() ? 1.0f : 0.0f, loss_sum.options())});
    if (parallel_.comm) parallel_.comm->AllReduceSumAsync(numbers)->Wait();
    const auto host = numbers.to(torch::kCPU, torch::kDouble);
    r.loss = host[0].item<double>() / o_.world_size;
    r.grad_norm = host[1].item<double>() / o_.world_size;
    stop = host[2].item<double>() > 0;
    ++state_.step;
    state_.samples_seen += state_.global_batch;
    if (ema_) ema_->AfterStep(state_.step);
    r.step = state_.step;
    r.samples_seen = state_.samples_seen;
    r.allreduce_exposed_seconds =
        parallel_.reducer ? parallel_.reducer->last_exposed_allreduce_seconds() : 0;
    return r;
  }

  // Once: the step captured as a CUDA graph, and the start-up summary after the first step.
  void ReportFirstSteps() {
    if (step_graph_ && step_graph_->graphs() > graphs_reported_) {
      graphs_reported_ = step_graph_->graphs();
      const std::string which = dataset_->buckets() > 1
                                    ? " (shape " + std::to_string(graphs_reported_) + " of " +
                                          std::to_string(dataset_->buckets()) + ")"
                                    : "";
      reporter_.OnEvent(EventLevel::kInfo, "train.cuda_graphs: step " +
                                               std::to_string(state_.step) + which +
                                               " captured as a CUDA graph; later steps replay it");
    }
    if (!startup_reported_) {
      startup_.Mark("rest of the first step");
      reporter_.OnEvent(EventLevel::kInfo, startup_.Summary());
      startup_reported_ = true;
    }
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

  // eval: every eval.every_steps steps and at the last step.
  bool EvalDue(int64_t step) const {
    if (!evaluator_) return false;
    const int64_t every = spec_.eval.every_steps;
    return step == spec_.train.max_steps || (every > 0 && step % every == 0);
  }

  const TrainerOptions& o_;
  const JobSpec& spec_;
  Reporter& reporter_;
  torch::Device device_{torch::kCPU};
  torch::ScalarType compute_dtype_ = torch::kFloat;
  PredictionType prediction_type_ = PredictionType::kEpsilon;  // the schedule's
  UNet3D model_{nullptr};
  std::shared_ptr<const LatentDataset> dataset_;     // what training draws from
  std::shared_ptr<const LatentDataset> eval_clips_;  // eval: held out, or eval.path's
  std::unique_ptr<Evaluator> evaluator_;
  std::unique_ptr<DistributedSampler> sampler_;
  std::unique_ptr<NoiseSchedule> schedule_;
  std::optional<TrainedLora> lora_;  // model.lora: the adapters that train
  std::vector<std::pair<std::string, torch::Tensor>> params_;
  NanRollback rollback_{o_};  // train.nan_policy
  std::unique_ptr<AdamW> optimizer_;
  std::unique_ptr<Ema> ema_;                     // train.ema
  std::pair<int64_t, double> last_eval_{-1, 0};  // the step and loss of the latest eval
  DataParallel parallel_;                        // world_size > 1
  std::optional<StepMetrics> metrics_;           // set by BuildDevice
  TrainingValidation validation_;                // validation.prompts
  std::unique_ptr<BatchLoader> batches_;         // after the dataset, sampler and schedule it reads
  TrainState state_;                             // step, samples seen; the sampler at checkpoints
  Checkpointer checkpoints_{o_, [this] { return CurrentState(); }};
  StartupTimer startup_;
  bool startup_reported_ = false;
  bool first_micro_step_timed_ = false;
  std::unique_ptr<AttentionWarmup> attention_warmup_;
  int graphs_reported_ = 0;
  std::vector<int> step_buckets_;           // the current step's micro-batches' shape buckets
  std::unique_ptr<StepGraph> step_graph_;   // train.cuda_graphs on one GPU
  std::unique_ptr<StepProfiler> profiler_;  // ADCTL_PROFILE_STEPS (benchmarks)
};

}  // namespace

int RunTrainer(const TrainerOptions& options) { return Trainer(options).Run(); }

}  // namespace adctl

// adworker: one training rank. Subcommands:
//   train          run a job spec (the coordinator's contract: docs/worker-contract.md)
//   check-parity   forward + backward of a diffusers model on given inputs, for parity checks
//   make-synthetic write the synthetic clips as a latent dataset (safetensors shards)
// Exit codes and the assignment flags: common/worker_contract.h (README "Worker exit codes").
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>

#include "common/data_dir_layout.h"
#include "common/job_layout.h"
#include "common/job_spec.h"
#include "common/logging.h"
#include "common/worker_contract.h"
#include "worker/data/latent_dataset.h"
#include "worker/data/preprocess.h"
#include "worker/model/weights.h"
#include "worker/report/coordinator_client.h"
#include "worker/text/tokenize_command.h"
#include "worker/tools/bench_sample.h"
#include "worker/tools/parity.h"
#include "worker/tools/tiny_pretrained.h"
#include "worker/train/trainer.h"
#include "worker/video/ffmpeg_log.h"
#include "worker/video/make_videos.h"

namespace adctl {
namespace {

namespace fs = std::filesystem;

std::atomic<bool> g_stop{false};

// Appends every step and checkpoint as one JSON line to a file (`--metrics-out`), for local
// runs and benchmarks that read numbers without a coordinator.
class JsonlReporter : public Reporter {
 public:
  explicit JsonlReporter(const std::string& path) : out_(path, std::ios::app) {}
  bool ok() const { return static_cast<bool>(out_); }
  void OnTrainingStarted(int64_t resumed_from_step, int64_t total_steps) override {
    Write({{"event", "start"},
           {"resumed_from_step", resumed_from_step},
           {"total_steps", total_steps}});
  }
  void OnStep(const StepReport& r) override {
    nlohmann::json line = {{"event", "step"}};
    ForEachMetricValue(r, [&](const char* name, const auto& v) { line[name] = v; });
    if (!r.eval_by_timestep.empty()) {
      line["eval_by_timestep"] = nlohmann::json::array();
      for (const auto& [t, loss] : r.eval_by_timestep)
        line["eval_by_timestep"].push_back({t, loss});
    }
    Write(line);
  }
  void OnCheckpoint(const CheckpointReport& r) override {
    nlohmann::json line = {{"event", "checkpoint"}};
    ForEachCheckpointValue(r, [&](const char* name, const auto& v) { line[name] = v; });
    Write(line);
  }
  void OnEvent(EventLevel, const std::string& message) override {
    Write({{"event", "message"}, {"message", message}});
  }
  void OnSamples(const SamplesReport& r) override {
    nlohmann::json files = nlohmann::json::array();
    for (const SampleFile& f : r.files) {
      nlohmann::json file;
      ForEachSampleValue(f, [&](const char* name, const auto& v) { file[name] = v; });
      files.push_back(std::move(file));
    }
    Write({{"event", "samples"}, {"step", r.step}, {"seconds", r.seconds}, {"files", files}});
  }
  bool StopRequested() override { return false; }

 private:
  void Write(const nlohmann::json& j) {
    std::lock_guard<std::mutex> lock(mu_);
    out_ << j.dump() << "\n";
    out_.flush();
  }
  std::mutex mu_;
  std::ofstream out_;
};

// Set by the trainer (or preprocess) once its loop watches g_stop.
std::atomic<bool> g_stop_watched{false};

// Once the loop runs, only sets the flag: the loop checkpoints and exits. Before it (loading,
// the rendezvous), nothing is worth a grace period: the rank ends now (_exit is
// async-signal-safe), its devices free, and the last committed checkpoint stands.
void OnSigterm(int) {
  g_stop.store(true);
  if (!g_stop_watched.load()) _exit(kExitStopped);
}

std::string EnvOr(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::string(v) : fallback;
}

struct TrainArgs {
  std::vector<std::string> assignment_args;  // WorkerAssignment's flags
  std::vector<std::string> overrides;
  std::string metrics_out;
};

int Train(const TrainArgs& a) {
  auto assignment = WorkerAssignment::FromArgs(a.assignment_args);
  if (!assignment.ok()) {
    spdlog::error("{}", assignment.status().ToString());
    return kExitBadSpec;
  }
  auto spec = LoadJobSpecFile(assignment->spec_path, a.overrides);
  if (!spec.ok()) {
    spdlog::error("{}", spec.status().ToString());
    return kExitBadSpec;
  }
  TrainerOptions o;
  o.spec = *spec;
  o.rank = assignment->rank;
  o.world_size = assignment->world_size;
  o.local_rank = assignment->local_rank;
  o.local_world_size = assignment->local_world_size;
  o.attempt = assignment->attempt;
  o.job_dir = assignment->job_dir;
  const std::string& coordinator = assignment->coordinator;
  const std::string& job_id = assignment->job_id;

  std::vector<std::unique_ptr<Reporter>> sinks;
  sinks.push_back(MakeLogReporter(o.rank));
  std::string metrics_out = a.metrics_out;
  const std::string metrics_dir = EnvOr("ADWORKER_METRICS_DIR", "");
  if (metrics_out.empty() && !metrics_dir.empty()) {
    // Set in adctld's environment, it reaches every rank it launches (benchmarks read it).
    metrics_out = metrics_dir + "/" + job_id + "-attempt-" + std::to_string(o.attempt) + "-rank-" +
                  std::to_string(o.rank) + ".jsonl";
  }
  if (!metrics_out.empty()) {
    auto jsonl = std::make_unique<JsonlReporter>(metrics_out);
    if (!jsonl->ok()) {
      spdlog::error("--metrics-out {}: cannot open for writing", metrics_out);
      return kExitBadSpec;
    }
    sinks.push_back(std::move(jsonl));
  }
  CoordinatorClient* client = nullptr;
  if (!coordinator.empty()) {
    // adctld keeps its current address in <data-dir>/adctld.json, and a job directory adctld
    // made is <data-dir>/jobs/<id>: a rank follows an adctld that came back elsewhere.
    const std::filesystem::path jobs = std::filesystem::path(o.job_dir).parent_path();
    const std::string address_file =
        jobs.filename() == "jobs" ? DataDirLayout(jobs.parent_path().string()).info() : "";
    auto connected = CoordinatorClient::Connect(coordinator, job_id, o.attempt, o.rank,
                                                o.world_size, EnvOr(kWorkerTokenEnv, ""),
                                                std::chrono::seconds(60), address_file);
    if (!connected.ok()) {
      spdlog::error("coordinator {}: {}", coordinator, connected.status().ToString());
      // Unreachable is worth a retry; a wrong token or a superseded attempt is not.
      return connected.status().code() == StatusCode::kUnavailable ? kExitTransient : kExitBadSpec;
    }
    client = connected->get();
    if (!o.job_dir.empty()) {
      client->SetSpillPath(JobLayout(o.job_dir).rank_pending_reports(o.attempt, o.rank));
    }
    sinks.push_back(std::move(*connected));
  }
  auto reporter = MakeFanOutReporter(std::move(sinks));
  o.reporter = reporter.get();
  o.store = client;  // nullptr: a directory store under the job directory
  o.stop_flag = &g_stop;
  o.stop_watched = &g_stop_watched;
  spdlog::info("rank {}/{} job {} attempt {} dir {}", o.rank, o.world_size, job_id, o.attempt,
               o.job_dir);
  const int rc = o.spec.kind == JobKind::kPreprocess ? RunPreprocess(o) : RunTrainer(o);
  if (client != nullptr && !client->Flush(std::chrono::seconds(10))) {
    spdlog::warn("coordinator {}: not every report was delivered before exit", coordinator);
  }
  return rc;
}

}  // namespace
}  // namespace adctl

int main(int argc, char** argv) {
  using namespace adctl;
  CLI::App app{"adworker: one AnimateDiff training rank (see docs/worker-contract.md)"};
  app.require_subcommand(1);
  std::string log_level;
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error (env ADCTL_LOG_LEVEL)");

  TrainArgs ta;
  auto* train = app.add_subcommand("train", "Run a training job spec");
  // The assignment flags are the worker contract's (common/worker_contract.h), parsed there.
  train->allow_extras();
  train->footer(
      "Assignment: --spec FILE [--job-dir DIR] [--job-id ID] [--attempt A] [--rank R]\n"
      "  [--world-size N] [--local-rank L] [--local-world-size N] [--coordinator HOST:PORT]\n"
      "  (job dir: the spec's directory; no coordinator: a standalone run)");
  train->add_option("--set", ta.overrides, "override a spec field: key=value (repeatable)");
  train->add_option("--metrics-out", ta.metrics_out,
                    "append each step as a JSON line to this file (default: "
                    "$ADWORKER_METRICS_DIR/<job>-attempt-<a>-rank-<r>.jsonl when that is set)");

  auto* preprocess = app.add_subcommand(
      "preprocess", "Run a preprocess job spec (videos + captions -> latent cache) standalone");
  preprocess->allow_extras();
  preprocess->footer("Same assignment flags as train: --spec FILE [--rank R --world-size N] ...");
  preprocess->add_option("--set", ta.overrides, "override a spec field: key=value (repeatable)");
  preprocess->add_option("--metrics-out", ta.metrics_out, "append progress as JSON lines");

  std::string vocab;
  std::vector<std::string> texts;
  auto* tokenize = app.add_subcommand(
      "tokenize", "Print CLIP token ids (no start/end tokens) of each TEXT as a JSON array");
  tokenize
      ->add_option("--vocab", vocab,
                   "CLIP's bpe_simple_vocab_16e6.txt.gz or a Hugging Face tokenizer folder")
      ->required();
  tokenize->add_option("texts", texts, "captions")->required();

  std::string tiny_out, tiny_shape = "tiny", tiny_vocab;
  uint64_t tiny_seed = 0;
  auto* tiny = app.add_subcommand(
      "make-tiny-pretrained", "Write a small random Stable Diffusion folder (diffusers layout)");
  tiny->add_option("--out", tiny_out, "output directory")->required();
  tiny->add_option("--seed", tiny_seed, "weights seed");
  tiny->add_option("--shape", tiny_shape,
                   "tiny (default) or sd15 (SD1.5's real sizes, random, fp16 files: benchmarks)");
  tiny->add_option("--vocab", tiny_vocab, "sd15: CLIP's bpe_simple_vocab_16e6.txt.gz");

  std::string videos_out;
  int video_clips = 16;
  uint64_t video_seed = 0;
  auto* videos = app.add_subcommand(
      "make-videos", "Write encoded videos of moving shapes and a WebVid-style videos.csv");
  videos->add_option("--out", videos_out, "output directory")->required();
  videos->add_option("--clips", video_clips, "number of videos")->check(CLI::Range(1, 100000));
  videos->add_option("--seed", video_seed, "seed");
  SyntheticVideoFormat video_format;  // 0: the mixed sizes, lengths and rates
  videos->add_option("--width", video_format.width, "every clip this wide (even)")
      ->check(CLI::NonNegativeNumber);
  videos->add_option("--height", video_format.height, "every clip this high (even)")
      ->check(CLI::NonNegativeNumber);
  videos->add_option("--frames", video_format.frames, "every clip this long")
      ->check(CLI::Range(0, 100000));
  videos->add_option("--fps", video_format.fps, "every clip at this rate")
      ->check(CLI::NonNegativeNumber);

  std::string unet2d, adapter, unet_motion, text_encoder, vae, io_in, sampling_io, io_out,
      motion_lora;
  AdamWParityOptions adamw;
  adamw.steps = 0;
  auto* parity = app.add_subcommand(
      "check-parity", "Run a model on given inputs: UNet forward/backward, text encoder or VAE");
  parity->add_option("--unet2d", unet2d, "diffusers UNet2DConditionModel directory");
  parity->add_option("--motion-adapter", adapter, "diffusers MotionAdapter directory");
  parity->add_option("--unet-motion", unet_motion, "diffusers UNetMotionModel directory");
  parity->add_option("--motion-lora", motion_lora,
                     "a LoRA file (diffusers' or AnimateDiff's layout) on the frozen UNet: with "
                     "--io → pred, loss and every LoRA tensor's gradient (unet.<module>.lora_A."
                     "weight)");
  parity->add_option("--text-encoder", text_encoder,
                     "transformers CLIPTextModel directory (io: input_ids → last_hidden_state, "
                     "pooled)");
  parity->add_option("--vae", vae,
                     "diffusers AutoencoderKL directory (io: image → mean, logvar, decoded)");
  parity->add_option("--io", io_in, "inputs: sample, timesteps, encoder_hidden_states, target");
  parity->add_option("--sampling-io", sampling_io,
                     "with --unet-motion and --vae: latents_init, prompt_embeds, "
                     "negative_prompt_embeds (settings: README.json beside it) → DDIM + CFG "
                     "samples alpha1/alpha0 .latents and .video");
  parity->add_option("--adamw-steps", adamw.steps,
                     "with --io: this many AdamW steps on the batch → loss.N, lr.N, grad_norm.N, "
                     "param.<name>");
  parity->add_option("--lr", adamw.lr, "AdamW learning rate (--adamw-steps)");
  parity->add_option("--warmup-steps", adamw.warmup_steps,
                     "constant_with_warmup warm-up steps (--adamw-steps)");
  parity->add_option("--out", io_out, "output safetensors")->required();

  BenchSampleOptions bench;
  auto* bench_sample = app.add_subcommand(
      "bench-sample", "Time validation sampling (DDIM + guidance + VAE decode) on this device");
  bench_sample->add_option("--pretrained", bench.pretrained, "diffusers SD folder")->required();
  bench_sample->add_option("--motion-adapter", bench.motion_adapter,
                           "MotionAdapter folder (default: fresh v2-layout modules)");
  bench_sample->add_option("--frames", bench.frames);
  bench_sample->add_option("--height", bench.height);
  bench_sample->add_option("--width", bench.width);
  bench_sample->add_option("--steps", bench.steps, "DDIM steps");
  bench_sample->add_option("--guidance", bench.guidance);
  bench_sample->add_option("--repeat", bench.repeat)->check(CLI::Range(1, 100));
  bench_sample->add_option("--out", bench.out, "also write the JSON here");

  DataSpec synth;
  std::string synth_out;
  int64_t shard_size = 256, text_dim = 768, channels = 4;
  auto* make = app.add_subcommand("make-synthetic", "Write synthetic clips as a latent dataset");
  make->add_option("--out", synth_out, "output directory")->required();
  make->add_option("--num-samples", synth.num_samples);
  make->add_option("--frames", synth.frames);
  make->add_option("--height", synth.height, "latent height");
  make->add_option("--width", synth.width, "latent width");
  make->add_option("--text-len", synth.text_len);
  make->add_option("--text-dim", text_dim, "text width (the UNet's cross_attention_dim)");
  make->add_option("--seed", synth.seed);
  make->add_option("--shard-size", shard_size, "clips per shard");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : kExitBadSpec;
  }
  SetupLogging("adworker", log_level);
  std::signal(SIGTERM, OnSigterm);
  std::signal(SIGINT, OnSigterm);
  std::signal(SIGUSR1,
              OnSigterm);  // Slurm: `--signal=USR1@grace` before a time limit or preemption

  if (*train) {
    ta.assignment_args = train->remaining();
    return Train(ta);
  }
  if (*preprocess) {
    ta.assignment_args = preprocess->remaining();
    return Train(ta);
  }
  if (*parity) {
    const ModelSources sources{unet2d, adapter, unet_motion, ""};
    if (!sampling_io.empty()) {
      if (vae.empty() || (unet_motion.empty() && unet2d.empty())) {
        spdlog::error("check-parity --sampling-io needs --unet-motion (or --unet2d) and --vae");
        return kExitBadSpec;
      }
      return CheckSamplingParity(sources, vae, sampling_io, io_out);
    }
    if (io_in.empty()) {
      spdlog::error("check-parity: give --io FILE (or --sampling-io FILE)");
      return kExitBadSpec;
    }
    if (!text_encoder.empty()) return CheckTextEncoderParity(text_encoder, io_in, io_out);
    if (!vae.empty()) return CheckVaeParity(vae, io_in, io_out);
    if (adamw.steps > 0) return CheckAdamWParity(sources, io_in, adamw, io_out);
    if (!motion_lora.empty()) return CheckMotionLoraParity(sources, motion_lora, io_in, io_out);
    return CheckUNetParity(sources, io_in, io_out);
  }
  if (*tokenize) return RunTokenizeCommand(vocab, texts, std::cout, std::cerr);
  if (*tiny) {
    auto st = MakeTinyPretrained(tiny_out, tiny_seed, tiny_shape, tiny_vocab);
    if (!st.ok()) {
      spdlog::error("{}", st.ToString());
      return kExitCrash;
    }
    spdlog::info("wrote a random {} Stable Diffusion folder to {}", tiny_shape, tiny_out);
    return kExitOk;
  }
  if (*videos) {
    QuietFfmpegLogs();
    auto st = MakeVideos(videos_out, video_clips, video_seed, video_format);
    if (!st.ok()) {
      spdlog::error("{}", st.ToString());
      return kExitCrash;
    }
    spdlog::info("wrote {} videos and videos.csv to {}", video_clips, videos_out);
    return kExitOk;
  }
  if (*bench_sample) return BenchSample(bench);
  if (*make) {
    auto st = WriteSyntheticShards(synth, channels, text_dim, synth_out, shard_size);
    if (!st.ok()) {
      spdlog::error("{}", st.ToString());
      return kExitCrash;
    }
    spdlog::info("wrote {} synthetic clips to {}", synth.num_samples, synth_out);
    return kExitOk;
  }
  return kExitBadSpec;
}

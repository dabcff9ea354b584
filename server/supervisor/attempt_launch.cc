// AttemptMonitor, launching: an attempt's spec file, token, rank commands and environment
// (launch_plan.h), its STARTING transition and its ranks started through the job's launcher. A
// preempted job placed on fewer devices resumes on that many ranks (WithRankCount).
#include <spdlog/spdlog.h>

#include <filesystem>
#include <string>
#include <vector>

#include "common/fs_util.h"
#include "common/job_layout.h"
#include "common/job_spec.h"
#include "server/supervisor/attempt_monitor.h"
#include "server/supervisor/launch_plan.h"
#include "server/supervisor/path_policy.h"
#include "server/supervisor/secrets.h"

extern char** environ;

namespace adctl {

Status AttemptMonitor::LaunchLocked(const JobRecord& job, const std::vector<std::string>& devices,
                                    bool is_restart) {
  const int attempt = job.attempt + 1;
  const double now = clock_->Now();
  // A launch that cannot be made fails the job (not retried: it would fail the same way).
  auto fail = [&](const std::string& message) {
    TransitionChanges end;
    end.devices = std::vector<std::string>{};
    if (job.state != JobState::kStarting) {
      recorder_->Transition(job.id, JobState::kStarting, message, {});
    }
    recorder_->Transition(job.id, JobState::kFailed, message, end);
    return FailedPrecondition(message);
  };
  Launcher* const launcher = launchers_.Find(job.launcher);
  if (launcher == nullptr) {
    return fail("resources.launcher " + Name(job.launcher) + ": " +
                launchers_.WhyMissing(job.launcher));
  }
  // The store's spec is the one copy; the rank reads this file, written from it, without the
  // launcher's fields and the webhooks (ClearCoordinatorFields).
  auto parsed = recorder_->specs().Get(job);
  if (!parsed.ok()) return parsed.status();
  // The paths again, where they are used: a folder swapped for a symlink since the submit (into
  // another job's folder, out of --write-root), or a checkpoint.dir another live job took since.
  Status paths = CheckSpecPaths(*parsed.value(), options_.data_dir, options_.paths);
  if (paths.ok()) paths = CheckCheckpointDirFree(store_, job.checkpoint_dir, job.id);
  if (!paths.ok()) return fail("launch refused: " + paths.message());
  TransitionChanges c;
  std::string shrunk;  // how the launch differs from the spec's rank count
  std::shared_ptr<const JobSpec> spec = parsed.value();
  if (static_cast<int>(devices.size()) != job.gpus && launcher->OnAdctldDevices()) {
    // A preempted job resuming on fewer ranks (resources.allow_shrink): the global batch is kept.
    auto resized = WithRankCount(*spec, static_cast<int64_t>(devices.size()), "resources.gpus");
    if (!resized.ok()) return fail("launch refused: " + resized.status().message());
    c.gpus = static_cast<int>(devices.size());
    c.spec_yaml = JobSpecToYaml(*resized);
    shrunk = " (shrunk from " + std::to_string(job.gpus) + " after preemption by " +
             job.preempted_by + ": train.grad_accum " + std::to_string(resized->train.grad_accum) +
             ", global batch " + std::to_string(resized->GlobalBatch()) + " kept)";
    spec = recorder_->specs().Remember(job.id, *c.spec_yaml, std::move(resized.value()));
  }
  if (!job.preempted_by.empty()) c.preempted_by = std::string();
  const ResourceSpec& resources = spec->resources;
  JobSpec rank_spec = *spec;
  ClearCoordinatorFields(&rank_spec);
  // The ranks get the checkpoint folder as just checked, its symlinks resolved: their saver
  // refuses to write once it resolves elsewhere (a swap after this launch).
  if (!rank_spec.checkpoint.dir.empty()) {
    std::error_code resolve_ec;
    const auto resolved = std::filesystem::weakly_canonical(rank_spec.checkpoint.dir, resolve_ec);
    if (!resolve_ec) rank_spec.checkpoint.dir = resolved.string();
  }
  ADCTL_RETURN_IF_ERROR(
      WriteFileAtomically(JobLayout(job.job_dir).spec(), JobSpecToYaml(rank_spec)));
  // A fresh token per attempt: it stops working when the attempt ends, and adctld keeps only
  // its hash (a restarted adctld re-attaches the ranks by it).
  const std::string token = RandomHex(16);
  c.attempt = attempt;
  c.attempt_token_sha256 = Sha256Hex(token);
  c.devices = devices;
  if (job.started_at == 0) c.started_at = now;
  if (is_restart) c.restarts = job.restarts + 1;
  std::string joined;
  for (const auto& d : devices) joined += (joined.empty() ? "" : ",") + d;
  const std::string message = (is_restart ? "restart " + std::to_string(job.restarts + 1) + "/" +
                                                std::to_string(job.max_restarts) + ": "
                                          : std::string()) +
                              "attempt " + std::to_string(attempt) + ": " +
                              std::to_string(devices.size()) + " rank(s) on " + joined + shrunk;
  auto started = recorder_->Transition(job.id, JobState::kStarting, message, c);
  if (!started.ok()) return started.status();
  if (is_restart && recorder_->observer()) recorder_->observer()->OnRestart(job.id);

  Attempt a = Attempt::Of(job, attempt, launcher, devices, now);

  AttemptLaunchInput input;
  input.worker_binary = options_.worker_binary;
  input.coordinator = options_.coordinator_address;
  input.job_id = job.id;
  input.job_dir = job.job_dir;
  input.token = token;
  input.attempt = attempt;
  input.devices = devices;
  input.host_slots = options_.devices.size();
  input.tls_ca = options_.tls_ca;
  AttemptLaunch launch;
  input.cluster = !launcher->OnAdctldDevices();
  if (input.cluster) {
    launch.cluster = launcher->Cluster(resources, job.grace_seconds);
    input.cluster_gpus = launch.cluster.gpus;
    input.cpus_per_task = launch.cluster.cpus_per_task;
  }
  input.worker_ifname = options_.worker_ifname;
  input.worker_env = options_.worker_env;
  std::vector<std::string> inherited;
  for (char** e = environ; *e; ++e) inherited.emplace_back(*e);
  launch.job_id = job.id;
  launch.attempt = attempt;
  launch.job_dir = job.job_dir;
  launch.ranks = PlanAttemptLaunch(input, WorkerBaseEnvironment(inherited, input));
  if (input.cluster) launch.cluster_argv = PlanClusterArgv(input);
  auto launched = launcher->LaunchAttempt(launch);
  if (!launched.ok()) {
    TransitionChanges end;
    end.devices = std::vector<std::string>{};
    end.end_attempt_reason = "launch failed";
    recorder_->Transition(job.id, JobState::kFailed,
                          "cannot start the ranks (" + launcher->name() +
                              " launcher): " + launched.status().message(),
                          end);
    return launched.status();
  }
  a.cluster_job = launched->cluster_job;
  if (!a.cluster_job.empty()) {
    Status st = store_->SetAttemptClusterJob(job.id, attempt, a.cluster_job);
    if (!st.ok()) spdlog::error("job {}: cannot record cluster job: {}", job.id, st.ToString());
    recorder_->AddEvent(job.id, attempt, "launcher", "info",
                        "attempt " + std::to_string(attempt) + " is " + launcher->ClusterJobNoun() +
                            " " + a.cluster_job);
  }
  for (int rank = 0; rank < static_cast<int>(launched->ranks.size()); ++rank) {
    const RankHandle& h = launched->ranks[rank];
    RankProc p;
    p.rank = rank;
    p.pgid = h.pgid;
    p.start_time = h.start_time;
    p.cluster_job = h.cluster_job;
    p.is_child = launcher->ReapsItsRanks();
    p.exit_path = h.exit_path;
    a.ranks.push_back(p);
    RankRecord rec;
    rec.job_id = job.id;
    rec.attempt = attempt;
    rec.rank = rank;
    rec.pgid = p.pgid;
    rec.pgid_start_time = p.start_time;
    rec.device = devices[rank];
    Status st = store_->UpsertRank(rec);
    if (!st.ok()) spdlog::error("job {}: cannot record rank {}: {}", job.id, rank, st.ToString());
  }
  active_[job.id] = std::move(a);
  return Status::Ok();
}

}  // namespace adctl

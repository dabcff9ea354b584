#include "server/api/convert.h"

#include <google/protobuf/message.h>

#include <algorithm>

#include "common/job_spec.h"
#include "proto/metric_point.h"
#include "proto/record_values.h"
#include "server/notify/webhooks.h"

namespace adctl {

double EtaSeconds(int64_t step, int64_t total_steps, double step_seconds) {
  if (step_seconds <= 0 || total_steps <= step) return 0;
  return static_cast<double>(total_steps - step) * step_seconds;
}

void JobToProto(const JobRecord& job, const std::string& wait_reason, v1::Job* out) {
  out->set_id(job.id);
  out->set_name(job.name);
  out->set_state(static_cast<v1::JobState>(job.state));
  out->set_spec_yaml(job.spec_yaml);
  out->set_gpus(job.gpus);
  out->set_priority(job.priority);
  out->set_submission_id(job.submission_id);
  out->set_submitted_at(job.submitted_at);
  out->set_started_at(job.started_at);
  out->set_finished_at(job.finished_at);
  out->set_attempt(job.attempt);
  out->set_restarts(job.restarts);
  out->set_max_restarts(job.max_restarts);
  out->set_message(job.message);
  if (job.state == JobState::kQueued) out->set_wait_reason(wait_reason);
  out->set_job_dir(job.job_dir);
  for (const auto& d : job.devices) out->add_devices(d);
  v1::Progress* p = out->mutable_progress();
  p->set_step(job.progress.step);
  p->set_total_steps(job.progress.total_steps);
  p->set_loss(job.progress.loss);
  p->set_clips_per_second(job.progress.clips_per_second);
  p->set_mfu_ratio(job.progress.mfu_ratio);
  p->set_learning_rate(job.progress.learning_rate);
  p->set_eval_loss(job.progress.eval_loss);
  p->set_eval_step(job.progress.eval_step);
  p->set_validation_seconds(job.progress.validation_seconds);
  p->set_step_seconds(job.progress.step_seconds);
  auto spec = ParseJobSpec(job.spec_yaml);
  if (!IsTerminal(job.state)) {
    double eta = EtaSeconds(job.progress.step, job.progress.total_steps, job.progress.step_seconds);
    // The validations still to render, each as long as the latest one took.
    if (eta > 0 && spec.ok() && job.progress.validation_seconds > 0) {
      eta += job.progress.validation_seconds *
             static_cast<double>(
                 ValidationsBetween(spec->validation, job.progress.step, job.progress.total_steps));
    }
    p->set_eta_seconds(eta);
  }
  p->set_last_checkpoint_step(job.progress.last_checkpoint_step);
  p->set_updated_at(job.progress.updated_at);
  out->set_launcher(Name(job.launcher));
  out->set_submitted_by(job.submitted_by);
  for (const std::string& id : job.after) out->add_after(id);
  out->set_after_any(job.after_any);
  for (const auto& [key, value] : job.labels) (*out->mutable_labels())[key] = value;
  if (spec.ok()) {
    out->set_trains(TrainsSummary(*spec));
    out->set_preemptible(spec->resources.preemptible);
  }
  // Until it starts again; a job that ended (cancelled while queued) is no longer waiting.
  if (!IsTerminal(job.state)) out->set_preempted_by(job.preempted_by);
  if (!job.cluster_job.empty()) out->mutable_cluster_job()->set_id(job.cluster_job);
}

void RanksToProto(const std::vector<RankRecord>& ranks, const std::map<int, bool>& alive,
                  v1::Job* out) {
  for (const RankRecord& r : ranks) {
    v1::Rank* p = out->add_ranks();
    p->set_rank(r.rank);
    p->set_pid(r.worker_pid);
    p->set_pgid(r.pgid);
    p->set_host(r.host);
    p->set_device(r.device);
    auto it = alive.find(r.rank);
    p->set_alive(it != alive.end() && it->second);
    p->set_exit_code(r.exit_code);
    p->set_exit_signal(r.exit_signal);
    p->set_last_heartbeat(r.last_heartbeat);
  }
}

void EventToProto(const EventRecord& e, v1::Event* out) {
  out->set_id(e.id);
  out->set_job_id(e.job_id);
  out->set_attempt(e.attempt);
  out->set_time(e.time);
  out->set_kind(e.kind);
  if (e.from_state) out->set_from_state(static_cast<v1::JobState>(*e.from_state));
  if (e.to_state) out->set_to_state(static_cast<v1::JobState>(*e.to_state));
  out->set_level(e.level);
  out->set_message(e.message);
}

void MetricToProto(const MetricRecord& m, v1::MetricPoint* out) {
  out->set_job_id(m.job_id);
  out->set_attempt(m.attempt);
  out->set_rank(m.rank);
  MetricValuesToProto(m, out);
  out->set_eta_seconds(EtaSeconds(m.step, m.total_steps, m.step_seconds));
}

MetricRecord MetricFromProto(const v1::MetricPoint& p) {
  MetricRecord m;
  MetricValuesFromProto(p, &m);
  return m;
}

void JobViewToProto(const JobView& view, v1::Job* out) {
  JobToProto(view.job, view.wait_reason, out);
  if (!view.ranks.empty()) RanksToProto(view.ranks, view.rank_alive, out);
  if (!view.job.cluster_job.empty()) {
    v1::ClusterJob* c = out->mutable_cluster_job();
    c->set_state(view.cluster.state);
    c->set_nodes(view.cluster.nodes);
    c->set_reason(view.cluster.reason);
  }
  if (view.preprocess) {
    v1::PreprocessProgress* p = out->mutable_progress()->mutable_preprocess();
    p->set_shards_written(view.preprocess->shards_written);
    p->set_shards(view.preprocess->shards);
    p->set_clips_written(view.preprocess->clips_written);
    for (const auto& [reason, n] : view.preprocess->videos_skipped) {
      (*p->mutable_videos_skipped())[reason] = n;
    }
    p->set_videos_per_second(view.preprocess->videos_per_second);
  }
}

void CheckpointToProto(const CheckpointView& checkpoint, v1::Checkpoint* out) {
  ValuesToProto(checkpoint, kCheckpointValues, out);
  out->set_created_at(checkpoint.created_at);
  out->set_attempt(checkpoint.attempt);
  out->set_on_disk(checkpoint.on_disk);
  out->set_pinned(checkpoint.pinned);
}

void DeviceToProto(const DeviceStatus& d, v1::Device* out) {
  out->set_name(d.device.name);
  out->set_kind(d.device.kind);
  out->set_model(d.device.model);
  out->set_uuid(d.device.uuid);
  // A device without a reading (a CPU slot) has none: 0, which the CLI shows as "-".
  out->set_memory_total_bytes(std::max<int64_t>(0, d.device.reading.memory_total_bytes));
  out->set_memory_used_bytes(std::max<int64_t>(0, d.device.reading.memory_used_bytes));
  out->set_job_id(d.job_id);
}

void SampleToProto(const SampleView& view, v1::Sample* out) {
  const SampleRecord& s = view.sample;
  ValuesToProto(s, kSampleValues, out);
  out->set_attempt(s.attempt);
  out->set_created_at(s.created_at);
  out->set_on_disk(view.on_disk);
}

SampleRecord SampleFromProto(const v1::Sample& p) {
  SampleRecord s;
  ValuesFromProto(p, kSampleValues, &s);
  s.attempt = p.attempt();
  s.created_at = p.created_at();
  return s;
}

void MotionExportToProto(const MotionExport& e, v1::ExportMotionModulesResponse* out) {
  out->set_step(e.step);
  out->set_format(ExportFormatName(e.format));
  out->set_path(e.relative);
  out->set_motion_norm(e.motion_norm);
  out->set_created(e.created);
  for (const ArtifactView& f : e.files) {
    v1::ArtifactFile* file = out->add_files();
    file->set_path(f.relative);
    file->set_size_bytes(f.size_bytes);
  }
}

void ExportToProto(const MotionExport& e, v1::Export* out) {
  out->set_step(e.step);
  out->set_format(ExportFormatName(e.format));
  out->set_weights(e.weights);
  out->set_path(e.relative);
  out->set_created_at(e.created_at);
  for (const ArtifactView& f : e.files) {
    v1::ArtifactFile* file = out->add_files();
    file->set_path(f.relative);
    file->set_size_bytes(f.size_bytes);
  }
}

void PlanToProto(const SubmitPlan& plan, v1::SubmitPlan* out) {
  out->set_spec_yaml(plan.spec_yaml);
  out->set_ranks(plan.ranks);
  out->set_launcher(Name(plan.launcher));
  out->set_global_batch(plan.global_batch);
  for (const std::string& d : plan.devices) out->add_devices(d);
  out->set_wait_reason(plan.wait_reason);
  out->set_trains(plan.trains);
  for (const std::string& url : plan.webhooks) out->add_webhooks(RedactWebhookUrl(url));
  if (plan.memory) {
    const MemoryEstimate& m = *plan.memory;
    v1::MemoryEstimate* e = out->mutable_memory();
    e->set_peak_bytes(m.peak_bytes());
    e->set_weights_bytes(m.weights_bytes);
    e->set_trainable_bytes(m.trainable_bytes);
    e->set_activation_bytes(m.activation_bytes);
    e->set_workspace_bytes(m.workspace_bytes);
    e->set_trainable_params(m.trainable_params);
    e->set_frozen_params(m.frozen_params);
    e->set_basis(m.basis);
    e->set_device_memory_bytes(plan.device_memory_bytes);
  }
}

}  // namespace adctl

#include "server/supervisor/job_recorder.h"

#include <spdlog/spdlog.h>

#include <nlohmann/json.hpp>

namespace adctl {

namespace {

// What every webhook body says about the job (docs/notifications.md).
nlohmann::json JobPayload(const JobRecord& job, const std::string& event) {
  nlohmann::json labels = nlohmann::json::object();
  for (const auto& [k, v] : job.labels) labels[k] = v;
  return {{"event", event},
          {"job_id", job.id},
          {"name", job.name},
          {"state", JobStateName(job.state)},
          {"message", job.message},
          {"submitted_by", job.submitted_by},
          {"labels", labels},
          {"attempt", job.attempt},
          {"restarts", job.restarts},
          {"step", job.progress.step},
          {"total_steps", job.progress.total_steps},
          {"loss", job.progress.loss},
          {"eval_loss", job.progress.eval_loss},
          {"submitted_at", job.submitted_at},
          {"finished_at", job.finished_at}};
}

}  // namespace

std::vector<std::string> JobRecorder::Webhooks(const JobRecord& job) {
  auto spec = specs_.Get(job);
  if (!spec.ok()) {
    spdlog::warn("job {}: its webhooks are unknown: {}", job.id, spec.status().ToString());
    return {};
  }
  return (*spec)->notify.webhooks;
}

Result<JobRecord> JobRecorder::Transition(const std::string& job_id, JobState to,
                                          const std::string& message,
                                          const TransitionChanges& changes,
                                          std::optional<JobState> expected_from) {
  auto job = store_->Transition(job_id, expected_from, to, message, changes);
  if (job.ok()) {
    spdlog::info("job {}: {} ({})", job_id, JobStateName(to), message);
    if (IsTerminal(to)) {
      if (notifier_) {
        nlohmann::json payload = JobPayload(*job, "job.ended");
        payload["text"] = "adctl: job " + job->id + " (" + job->name + ") " + JobStateName(to) +
                          (message.empty() ? "" : ": " + message);
        notifier_->Post(job_id, Webhooks(*job), payload);
      }
      specs_.Forget(job_id);
      if (observer_) observer_->OnJobFinished(job_id, to);
    }
    changes_->Notify();
  } else {
    spdlog::warn("job {}: transition to {} refused: {}", job_id, JobStateName(to),
                 job.status().ToString());
  }
  return job;
}

Status JobRecorder::AddEvent(const std::string& job_id, int attempt, const std::string& kind,
                             const std::string& level, const std::string& message) {
  EventRecord e;
  e.job_id = job_id;
  e.attempt = attempt;
  e.kind = kind;
  e.level = level;
  e.message = message;
  auto id = store_->AddEvent(e);
  if (!id.ok()) {
    spdlog::warn("job {}: cannot record event '{}': {}", job_id, message, id.status().ToString());
    return id.status();
  }
  changes_->Notify();
  return Status::Ok();
}

void JobRecorder::SamplesReady(const JobRecord& job, const std::vector<SampleRecord>& samples) {
  if (!notifier_ || samples.empty()) return;
  nlohmann::json payload = JobPayload(job, "job.samples");
  nlohmann::json list = nlohmann::json::array();
  for (const SampleRecord& s : samples) {
    list.push_back({{"step", s.step},
                    {"index", s.index},
                    {"prompt", s.prompt},
                    {"mp4", s.mp4},
                    {"gif", s.gif}});
  }
  payload["samples"] = list;
  payload["sample_step"] = samples.front().step;
  payload["text"] = "adctl: job " + job.id + " (" + job.name +
                    "): " + std::to_string(samples.size()) + " validation sample(s) at step " +
                    std::to_string(samples.front().step);
  notifier_->Post(job.id, Webhooks(job), payload);
}

}  // namespace adctl

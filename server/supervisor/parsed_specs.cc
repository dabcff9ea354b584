#include "server/supervisor/parsed_specs.h"

namespace adctl {

std::shared_ptr<const JobSpec> ParsedSpecs::Remember(const std::string& job_id,
                                                     const std::string& yaml, JobSpec spec) {
  auto parsed = std::make_shared<const JobSpec>(std::move(spec));
  std::lock_guard<std::mutex> lock(mu_);
  specs_[job_id] = Entry{yaml, parsed};
  return parsed;
}

Result<std::shared_ptr<const JobSpec>> ParsedSpecs::Get(const JobRecord& job) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = specs_.find(job.id);
    if (it != specs_.end() && it->second.yaml == job.spec_yaml) return it->second.spec;
  }
  // Validated at submit; failing here means the database was edited by hand.
  auto spec = ParseJobSpec(job.spec_yaml);
  if (!spec.ok()) {
    return Status(spec.status().code(),
                  "job " + job.id + ": stored spec: " + spec.status().message());
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++parses_;
  }
  return Remember(job.id, job.spec_yaml, std::move(spec.value()));
}

void ParsedSpecs::Forget(const std::string& job_id) {
  std::lock_guard<std::mutex> lock(mu_);
  specs_.erase(job_id);
}

int ParsedSpecs::parses() const {
  std::lock_guard<std::mutex> lock(mu_);
  return parses_;
}

size_t ParsedSpecs::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return specs_.size();
}

}  // namespace adctl

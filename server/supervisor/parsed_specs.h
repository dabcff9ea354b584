// The parsed spec of each live job, so a spec is parsed once: at submit (JobManager), after a
// resume that rewrites it, or, after an adctld restart, on first use from the store's YAML (the
// one durable copy). A cached spec is used only while the job's stored YAML is the one it was
// parsed from; the JobRecorder forgets a job when it ends. Thread-safe.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "common/job_spec.h"
#include "common/status.h"
#include "server/store/store.h"

namespace adctl {

class ParsedSpecs {
 public:
  // `spec` is what `yaml` (the stored spec_yaml) parses to.
  std::shared_ptr<const JobSpec> Remember(const std::string& job_id, const std::string& yaml,
                                          JobSpec spec);
  // The parsed spec of `job`: the remembered one, or parsed now from job.spec_yaml.
  Result<std::shared_ptr<const JobSpec>> Get(const JobRecord& job);
  void Forget(const std::string& job_id);

  // How many times Get had to parse (tests: a spec is parsed once).
  int parses() const;
  size_t size() const;

 private:
  struct Entry {
    std::string yaml;
    std::shared_ptr<const JobSpec> spec;
  };
  mutable std::mutex mu_;
  std::map<std::string, Entry> specs_;  // guarded by mu_
  int parses_ = 0;                      // guarded by mu_
};

}  // namespace adctl

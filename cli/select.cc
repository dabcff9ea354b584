#include "cli/select.h"

#include <unistd.h>

#include <algorithm>
#include <iostream>
#include <map>

#include "cli/render.h"

namespace adctl::cli {

namespace v1 = adctl::v1;
using Stub = v1::JobService::Stub;

bool ParseLabels(const std::vector<std::string>& pairs,
                 google::protobuf::Map<std::string, std::string>* out) {
  for (const std::string& pair : pairs) {
    const size_t eq = pair.find('=');
    if (eq == std::string::npos || eq == 0) {
      std::cerr << "adctl: --label " << pair << ": expected key=value\n";
      return false;
    }
    (*out)[pair.substr(0, eq)] = pair.substr(eq + 1);
  }
  return true;
}

std::string LabelsText(const google::protobuf::Map<std::string, std::string>& labels) {
  std::map<std::string, std::string> sorted;
  for (const auto& label : labels) sorted[label.first] = label.second;
  std::string out;
  for (const auto& [k, v] : sorted) out += (out.empty() ? "" : ", ") + k + "=" + v;
  return out;
}

int Bulk(Client& c, const char* verb, const BulkArgs& a, std::initializer_list<v1::JobState> states,
         const std::function<int(const std::string&)>& one) {
  v1::ListJobsRequest req;
  if (!ParseLabels(a.labels, req.mutable_labels())) return kExitUsage;
  for (v1::JobState s : states) req.add_states(s);
  req.set_page_size(1000);
  std::vector<v1::Job> jobs;
  do {
    v1::ListJobsResponse page;
    if (int rc = c.Call(&Stub::ListJobs, req, &page); rc != 0) return rc;
    for (auto& j : *page.mutable_jobs()) jobs.push_back(std::move(j));
    req.set_page_token(page.next_page_token());
  } while (!req.page_token().empty());
  const std::string selector = LabelsText(req.labels());
  if (jobs.empty()) {
    std::cerr << "adctl: no job with " << selector << " to " << verb << "\n";
    return 0;
  }
  std::cerr << verb << " " << jobs.size() << " job(s) with " << selector << ":";
  for (const auto& j : jobs) std::cerr << " " << j.id() << " (" << StateName(j.state()) << ")";
  std::cerr << "\n";
  if (!a.yes) {
    if (!isatty(STDIN_FILENO)) {
      std::cerr << "adctl: " << jobs.size() << " job(s) match; add --yes to " << verb
                << " them (no terminal to ask on)\n";
      return kExitUsage;
    }
    std::cerr << "Go on? [y/N] " << std::flush;
    std::string answer;
    std::getline(std::cin, answer);
    if (answer != "y" && answer != "Y" && answer != "yes") {
      std::cerr << "adctl: nothing done\n";
      return kExitUsage;
    }
  }
  int worst = 0, done = 0;
  for (const auto& j : jobs) {
    const int rc = one(j.id());
    if (rc == 0) ++done;
    worst = std::max(worst, rc);
  }
  std::cerr << verb << ": " << done << " of " << jobs.size() << " job(s)\n";
  return worst;
}

bool OneTarget(const char* verb, const std::string& job_id, const BulkArgs& bulk) {
  if (job_id.empty() == bulk.labels.empty()) {
    std::cerr << "adctl: " << verb << ": give a JOB or --label k=v (every job with it), not "
              << (job_id.empty() ? "neither" : "both") << "\n";
    return false;
  }
  return true;
}

}  // namespace adctl::cli

#include "cli/sweep.h"

#include <cstdio>
#include <map>
#include <random>

#include "cli/render.h"
#include "common/sha256.h"

namespace adctl::cli {

Result<SweepAxis> ParseSweep(const std::string& text) {
  const size_t eq = text.find('=');
  if (eq == std::string::npos || eq == 0) {
    return InvalidArgument("--sweep " + text + ": expected path=v1,v2 (e.g. train.lr=1e-4,5e-5)");
  }
  SweepAxis axis;
  axis.path = text.substr(0, eq);
  const std::string values = text.substr(eq + 1);
  size_t start = 0;
  while (true) {
    const size_t comma = values.find(',', start);
    const std::string value = values.substr(start, comma - start);
    if (value.empty()) {
      return InvalidArgument("--sweep " + text + ": an empty value (values are separated by ',')");
    }
    axis.values.push_back(value);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return axis;
}

Result<std::vector<std::vector<std::string>>> SweepPoints(const std::vector<SweepAxis>& axes) {
  constexpr size_t kMaxPoints = 256;
  size_t total = 1;
  for (size_t i = 0; i < axes.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (axes[j].path == axes[i].path) {
        return InvalidArgument("--sweep " + axes[i].path + ": given twice; list its values once");
      }
    }
    total *= axes[i].values.size();
    if (total > kMaxPoints) {
      return InvalidArgument("--sweep: more than " + std::to_string(kMaxPoints) +
                             " jobs; sweep fewer values");
    }
  }
  std::vector<std::vector<std::string>> points(1);
  for (const SweepAxis& axis : axes) {
    std::vector<std::vector<std::string>> next;
    for (const auto& point : points) {
      for (const std::string& value : axis.values) {
        next.push_back(point);
        next.back().push_back(axis.path + "=" + value);
      }
    }
    points = std::move(next);
  }
  return points;
}

std::string GroupSummary(const std::string& group, const std::vector<adctl::v1::Job>& jobs) {
  std::map<std::string, int> states;
  const adctl::v1::Job* best = nullptr;
  for (const auto& j : jobs) {
    ++states[StateName(j.state())];
    const double loss = j.progress().eval_loss();
    if (loss > 0 && (best == nullptr || loss < best->progress().eval_loss())) best = &j;
  }
  std::string out = "group " + group + ": " + std::to_string(jobs.size()) + " job(s)";
  std::string counts;
  for (const auto& [state, n] : states) {
    counts += (counts.empty() ? ": " : ", ") + std::to_string(n) + " " + state;
  }
  out += counts;
  if (best != nullptr) {
    char loss[32];
    std::snprintf(loss, sizeof(loss), "%.6g", best->progress().eval_loss());
    std::map<std::string, std::string> swept;
    for (const auto& label : best->labels()) {
      if (label.first != "group") swept[label.first] = label.second;
    }
    std::string values;
    for (const auto& [k, v] : swept) values += (values.empty() ? "" : ", ") + k + "=" + v;
    out += std::string("; best eval loss ") + loss + ": " + best->id() +
           (values.empty() ? "" : " (" + values + ")");
  }
  return out;
}

std::string SweepGroup(const std::string& submission_id) {
  if (!submission_id.empty()) return "g-" + Sha256Hex(submission_id).substr(0, 10);
  std::random_device random;
  std::uniform_int_distribution<int> digit(0, 15);
  std::string id = "g-";
  for (int i = 0; i < 10; ++i) id += "0123456789abcdef"[digit(random)];
  return id;
}

}  // namespace adctl::cli

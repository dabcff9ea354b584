#include "cli/render.h"

#include <cmath>
#include <cstdio>
#include <sstream>

namespace adctl::cli {

std::string StateName(v1::JobState state) {
  std::string name = v1::JobState_Name(state);
  const std::string prefix = "JOB_STATE_";
  return name.rfind(prefix, 0) == 0 ? name.substr(prefix.size()) : name;
}

bool IsTerminalState(v1::JobState state) {
  return state == v1::JOB_STATE_SUCCEEDED || state == v1::JOB_STATE_FAILED ||
         state == v1::JOB_STATE_CANCELLED;
}

std::string FormatDuration(double seconds) {
  if (seconds < 0) seconds = 0;
  char buf[32];
  long s = std::lround(seconds);
  if (s < 60) {
    snprintf(buf, sizeof(buf), "%lds", s);
  } else if (s < 3600) {
    snprintf(buf, sizeof(buf), "%ldm%02lds", s / 60, s % 60);
  } else if (s < 86400) {
    snprintf(buf, sizeof(buf), "%ldh%02ldm", s / 3600, (s % 3600) / 60);
  } else {
    snprintf(buf, sizeof(buf), "%ldd%02ldh", s / 86400, (s % 86400) / 3600);
  }
  return buf;
}

std::string FormatSeconds(double seconds) {
  char buf[32];
  if (seconds < 1) {
    snprintf(buf, sizeof(buf), "%.2fs", seconds);
  } else if (seconds < 10) {
    snprintf(buf, sizeof(buf), "%.1fs", seconds);
  } else {
    return FormatDuration(seconds);
  }
  return buf;
}

std::string FormatBytes(int64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  snprintf(buf, sizeof(buf), u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
  return buf;
}

std::string FormatProgress(const v1::Progress& p) {
  if (p.total_steps() <= 0) return "-";
  char buf[64];
  snprintf(buf, sizeof(buf), "%lld/%lld (%d%%)", static_cast<long long>(p.step()),
           static_cast<long long>(p.total_steps()),
           static_cast<int>(100.0 * static_cast<double>(p.step()) /
                            static_cast<double>(p.total_steps())));
  return buf;
}

bool Trains(const v1::Job& job) { return job.trains() != "preprocessing"; }

std::string PreprocessLine(const v1::PreprocessProgress& p, bool with_reasons) {
  v1::Progress shards;
  shards.set_step(p.shards_written());
  shards.set_total_steps(p.shards());
  std::string line = "shards " + FormatProgress(shards) + ", " + std::to_string(p.clips_written()) +
                     " clips written";
  int64_t skipped = 0;
  std::string reasons;
  // In the order the worker names them (a map's order is alphabetical).
  for (const char* reason : {"missing", "unreadable", "zero_frames", "truncated", "too_short"}) {
    auto it = p.videos_skipped().find(reason);
    if (it == p.videos_skipped().end() || it->second == 0) continue;
    skipped += it->second;
    reasons +=
        (reasons.empty() ? "" : ", ") + std::string(reason) + " " + std::to_string(it->second);
  }
  line += ", " + std::to_string(skipped) + " skipped";
  if (with_reasons && skipped > 0) line += " (" + reasons + ")";
  if (p.videos_per_second() > 0) {
    char buf[48];
    snprintf(buf, sizeof(buf), ", %.2f videos/s", p.videos_per_second());
    line += buf;
  }
  return line;
}

std::string ProgressLine(const v1::Job& job) {
  std::string line = job.id() + " " + StateName(job.state());
  const v1::Progress& p = job.progress();
  if (p.has_preprocess()) {
    if (p.preprocess().shards() > 0 || job.state() == v1::JOB_STATE_RUNNING) {
      line += " " + PreprocessLine(p.preprocess(), /*with_reasons=*/false);
      if (p.eta_seconds() > 0) line += " ETA " + FormatDuration(p.eta_seconds());
    }
  } else if (p.step() > 0 || job.state() == v1::JOB_STATE_RUNNING) {
    line += " step " + FormatProgress(p);
    if (p.step() > 0) {
      char buf[96];
      if (Trains(job)) {
        snprintf(buf, sizeof(buf), " loss %.4f %.2f clips/s", p.loss(), p.clips_per_second());
      } else {
        snprintf(buf, sizeof(buf), " %.2f clips/s", p.clips_per_second());
      }
      line += buf;
      if (p.mfu_ratio() > 0) {
        snprintf(buf, sizeof(buf), " MFU %.1f%%", 100 * p.mfu_ratio());
        line += buf;
      }
    }
    if (p.eta_seconds() > 0) line += " ETA " + FormatDuration(p.eta_seconds());
  }
  if (job.attempt() > 1) line += " attempt " + std::to_string(job.attempt());
  if (job.state() == v1::JOB_STATE_QUEUED && !job.wait_reason().empty()) {
    line += " (" + job.wait_reason() + ")";
  }
  return line;
}

std::string Table::ToString() const {
  std::vector<size_t> widths;
  for (const auto& row : rows_) {
    if (widths.size() < row.size()) widths.resize(row.size(), 0);
    for (size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], row[i].size());
  }
  std::string out;
  for (const auto& row : rows_) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line += std::string(widths[i] - row[i].size() + 2, ' ');
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  }
  return out;
}

std::string RenderPlan(const v1::SubmitPlan& plan) {
  std::ostringstream out;
  out << "dry run: the spec is valid; nothing was submitted\n";
  out << "Trains:        " << plan.trains() << "\n";
  out << "Ranks:         " << plan.ranks() << " (" << plan.launcher() << "), global batch "
      << plan.global_batch() << " clips\n";
  if (plan.devices_size() > 0) {
    std::string devices;
    for (const std::string& d : plan.devices()) devices += (devices.empty() ? "" : ", ") + d;
    out << "Would start:   now, on " << devices << "\n";
  } else {
    out << "Would wait:    " << plan.wait_reason() << "\n";
  }
  if (plan.has_memory()) {
    const v1::MemoryEstimate& m = plan.memory();
    out << "GPU memory:    ~" << FormatBytes(m.peak_bytes()) << " peak per rank (weights "
        << FormatBytes(m.weights_bytes()) << ", trained state " << FormatBytes(m.trainable_bytes())
        << ", activations " << FormatBytes(m.activation_bytes()) << ", workspace "
        << FormatBytes(m.workspace_bytes()) << ")\n";
    if (m.device_memory_bytes() > 0) {
      const bool fits = m.peak_bytes() <= m.device_memory_bytes();
      out << "               " << (fits ? "fits" : "does NOT fit") << " the "
          << FormatBytes(m.device_memory_bytes()) << " GPU"
          << (fits ? "" : ": lower train.batch_size or set model.gradient_checkpointing") << "\n";
    }
    out << "               from " << m.basis() << "\n";
  }
  for (const std::string& url : plan.webhooks()) out << "Webhook:       " << url << "\n";
  return out.str();
}

}  // namespace adctl::cli

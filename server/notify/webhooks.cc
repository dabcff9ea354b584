#include "server/notify/webhooks.h"

#include <httplib.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "common/job_spec.h"
#include "server/supervisor/secrets.h"

namespace adctl {

namespace {

double SteadySeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

constexpr double kMaxBackoffSeconds = 300;

struct SplitUrl {
  std::string origin;  // scheme://host[:port]
  std::string path;    // /path?query ("/" when none)
};

SplitUrl Split(const std::string& url) {
  const size_t scheme = url.find("://");
  const size_t host = scheme == std::string::npos ? 0 : scheme + 3;
  const size_t path = url.find_first_of("/?#", host);
  if (path == std::string::npos) return {url, "/"};
  std::string rest = url.substr(path);
  const size_t fragment = rest.find('#');
  if (fragment != std::string::npos) rest.resize(fragment);
  if (rest.empty() || rest[0] != '/') rest = "/" + rest;
  return {url.substr(0, path), rest};
}

}  // namespace

Result<WebhookOptions> LoadWebhookOptions(const std::vector<std::string>& urls,
                                          const std::string& secret_file, int max_attempts,
                                          double backoff_seconds) {
  WebhookOptions options;
  for (const std::string& url : urls) {
    ADCTL_RETURN_IF_ERROR(CheckWebhookUrl("--webhook", url));
    options.urls.push_back(url);
  }
  if (!secret_file.empty()) {
    std::ifstream in(secret_file);
    std::stringstream text;
    text << in.rdbuf();
    if (!in) return InvalidArgument("--webhook-secret-file " + secret_file + ": cannot be read");
    std::string secret = text.str();
    const size_t first = secret.find_first_not_of(" \t\r\n");
    const size_t last = secret.find_last_not_of(" \t\r\n");
    if (first == std::string::npos) {
      return InvalidArgument("--webhook-secret-file " + secret_file + ": is empty");
    }
    options.secret = secret.substr(first, last - first + 1);
  }
  options.max_attempts = max_attempts;
  options.backoff_seconds = backoff_seconds;
  return options;
}

std::vector<std::string> MergeWebhookUrls(std::vector<std::string> urls,
                                          const std::vector<std::string>& more) {
  for (const std::string& url : more) {
    if (std::find(urls.begin(), urls.end(), url) == urls.end()) urls.push_back(url);
  }
  return urls;
}

std::string WebhookSignature(const std::string& secret, const std::string& body) {
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
       reinterpret_cast<const unsigned char*>(body.data()), body.size(), mac, &length);
  std::string out = "sha256=";
  char hex[3];
  for (unsigned int i = 0; i < length; ++i) {
    std::snprintf(hex, sizeof(hex), "%02x", mac[i]);
    out += hex;
  }
  return out;
}

std::string RedactWebhookUrl(const std::string& url) {
  const SplitUrl split = Split(url);
  return split.path == "/" ? split.origin + "/" : split.origin + "/…";
}

WebhookNotifier::WebhookNotifier(WebhookOptions options, Report report)
    : options_(std::move(options)), report_(std::move(report)) {}

WebhookNotifier::~WebhookNotifier() { Stop(); }

void WebhookNotifier::Start() {
  std::lock_guard<std::mutex> lock(mu_);
  if (thread_.joinable()) return;
  stop_ = false;
  thread_ = std::thread([this] { Run(); });
}

void WebhookNotifier::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [due, d] : queue_) {
    spdlog::warn("webhook {}: {} of job {} dropped at shutdown (attempt {} of {} pending)",
                 RedactWebhookUrl(d.url), d.event, d.job_id, d.attempt + 1, options_.max_attempts);
  }
  queue_.clear();
}

void WebhookNotifier::Post(const std::string& job_id, const std::vector<std::string>& job_urls,
                           const nlohmann::json& payload) {
  const std::vector<std::string> urls = MergeWebhookUrls(options_.urls, job_urls);
  if (urls.empty()) return;
  const std::string body = payload.dump();
  const std::string event = payload.value("event", "");
  {
    std::lock_guard<std::mutex> lock(mu_);
    const double now = SteadySeconds();
    for (const std::string& url : urls) {
      if (queue_.size() >= options_.max_pending) {
        spdlog::warn("webhook {}: {} of job {} dropped: {} deliveries already pending",
                     RedactWebhookUrl(url), event, job_id, queue_.size());
        continue;
      }
      Delivery d;
      d.job_id = job_id;
      d.url = url;
      d.event = event;
      d.id = "d-" + RandomHex(8);
      d.body = body;
      queue_.emplace(now, std::move(d));
    }
  }
  cv_.notify_all();
}

size_t WebhookNotifier::pending() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queue_.size() + (sending_ ? 1 : 0);
}

void WebhookNotifier::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    if (queue_.empty()) {
      cv_.wait(lock);
      continue;
    }
    const double due = queue_.begin()->first;
    const double now = SteadySeconds();
    if (due > now) {
      cv_.wait_for(lock, std::chrono::duration<double>(due - now));
      continue;
    }
    Delivery d = std::move(queue_.begin()->second);
    queue_.erase(queue_.begin());
    sending_ = true;
    lock.unlock();

    const std::string error = Send(d);
    ++d.attempt;
    const std::string where = RedactWebhookUrl(d.url);
    if (error.empty()) {
      spdlog::info("webhook {}: {} of job {} delivered (attempt {})", where, d.event, d.job_id,
                   d.attempt);
      if (d.attempt > 1 && report_) {
        report_(d.job_id, "info",
                "webhook " + where + ": " + d.event + " delivered at attempt " +
                    std::to_string(d.attempt) + " (earlier: " + d.last_error + ")");
      }
    } else if (d.attempt >= options_.max_attempts) {
      spdlog::warn("webhook {}: {} of job {} not delivered after {} attempts: {}", where, d.event,
                   d.job_id, d.attempt, error);
      if (report_) {
        report_(d.job_id, "warn",
                "webhook " + where + ": " + d.event + " not delivered after " +
                    std::to_string(d.attempt) + " attempts: " + error);
      }
    } else {
      const double delay = std::min(
          kMaxBackoffSeconds, options_.backoff_seconds * static_cast<double>(1 << (d.attempt - 1)));
      spdlog::info("webhook {}: {} of job {} failed ({}); retry {} of {} in {:.1f} s", where,
                   d.event, d.job_id, error, d.attempt, options_.max_attempts - 1, delay);
      d.last_error = error;
      lock.lock();
      sending_ = false;
      queue_.emplace(SteadySeconds() + delay, std::move(d));
      continue;
    }
    lock.lock();
    sending_ = false;
  }
}

std::string WebhookNotifier::Send(const Delivery& d) const {
  const SplitUrl split = Split(d.url);
  httplib::Client client(split.origin);
  if (!client.is_valid()) return "not a URL httplib can reach";
  const auto timeout = std::chrono::duration_cast<std::chrono::microseconds>(
      std::chrono::duration<double>(options_.timeout_seconds));
  client.set_connection_timeout(timeout);
  client.set_read_timeout(timeout);
  client.set_write_timeout(timeout);
  client.enable_server_certificate_verification(true);
  httplib::Headers headers = {
      {"User-Agent", "adctld"}, {"X-Adctl-Event", d.event}, {"X-Adctl-Delivery", d.id}};
  if (!options_.secret.empty()) {
    headers.emplace("X-Adctl-Signature", WebhookSignature(options_.secret, d.body));
  }
  auto response = client.Post(split.path.c_str(), headers, d.body, "application/json");
  if (!response) return "no response (" + httplib::to_string(response.error()) + ")";
  if (response->status < 200 || response->status >= 300) {
    return "HTTP " + std::to_string(response->status);
  }
  return "";
}

}  // namespace adctl

// Webhook notifications (docs/notifications.md): JSON POSTs to adctld's `--webhook` URLs and a
// job's `notify.webhooks` when the job ends and when its validation samples are ready.
//
// Post() only queues: one delivery thread sends, so a slow or dead receiver never blocks the
// coordinator. Each POST carries the body's HMAC-SHA256 under adctld's secret
// (`X-Adctl-Signature: sha256=<hex>`, --webhook-secret-file; no header without a secret), the
// event name (`X-Adctl-Event`) and a delivery id that stays the same across retries
// (`X-Adctl-Delivery`, for receivers to drop duplicates). A delivery that fails (no connection,
// a timeout, a status other than 2xx) is retried after backoff_seconds, doubling each time (at
// most 5 minutes), up to max_attempts; its outcome after a retry or a give-up is reported (the
// job's events). Deliveries are in memory: those still pending when adctld stops are dropped,
// with a warning naming them. Thread-safe.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"

namespace adctl {

struct WebhookOptions {
  std::vector<std::string> urls;  // --webhook: told about every job
  std::string secret;             // the --webhook-secret-file's contents, trimmed ("": unsigned)
  int max_attempts = 5;           // --webhook-attempts
  double backoff_seconds = 2;     // --webhook-backoff-seconds: the first retry's delay
  double timeout_seconds = 10;    // connect, read and write, each
  size_t max_pending = 1000;      // beyond this, new deliveries are dropped (logged)
};

// adctld's flags as options: every URL checked (CheckWebhookUrl), the secret read from
// `secret_file` ("" : none) and trimmed of surrounding whitespace. InvalidArgument naming the
// flag otherwise (an unreadable or empty secret file).
Result<WebhookOptions> LoadWebhookOptions(const std::vector<std::string>& urls,
                                          const std::string& secret_file, int max_attempts,
                                          double backoff_seconds);

// `urls` then those of `more` it lacks, in order: each URL once (adctld's and a job's, a spec's
// and a request's).
std::vector<std::string> MergeWebhookUrls(std::vector<std::string> urls,
                                          const std::vector<std::string>& more);

// "sha256=" + hex HMAC-SHA256 of `body` under `secret` (OpenSSL): the X-Adctl-Signature value.
std::string WebhookSignature(const std::string& secret, const std::string& body);

// `url` as events and logs show it: scheme, host and port, the path elided ("https://hooks.
// slack.com/…"), since a webhook's path often is its token.
std::string RedactWebhookUrl(const std::string& url);

class WebhookNotifier {
 public:
  // `report(job_id, level, message)`: a delivery's outcome, when it took a retry or failed
  // (called on the delivery thread).
  using Report = std::function<void(const std::string& job_id, const std::string& level,
                                    const std::string& message)>;

  WebhookNotifier(WebhookOptions options, Report report);
  ~WebhookNotifier();
  WebhookNotifier(const WebhookNotifier&) = delete;
  WebhookNotifier& operator=(const WebhookNotifier&) = delete;

  void Start();
  // Stops the thread; what is still queued is dropped with a warning.
  void Stop();

  // Queues `payload` (its "event" names it) for adctld's URLs and `job_urls` (each URL once).
  // Returns at once.
  void Post(const std::string& job_id, const std::vector<std::string>& job_urls,
            const nlohmann::json& payload);

  // Deliveries queued or waiting for a retry.
  size_t pending() const;
  const WebhookOptions& options() const { return options_; }

 private:
  struct Delivery {
    std::string job_id;
    std::string url;
    std::string event;
    std::string id;  // X-Adctl-Delivery
    std::string body;
    int attempt = 0;  // attempts made
    std::string last_error;
  };
  void Run();
  // One POST; "" on a 2xx, else what went wrong.
  std::string Send(const Delivery& d) const;

  const WebhookOptions options_;
  const Report report_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  // Due time (steady clock, seconds) → delivery; guarded by mu_.
  std::multimap<double, Delivery> queue_;
  bool stop_ = false;     // guarded by mu_
  bool sending_ = false;  // a delivery is out of the queue, being sent; guarded by mu_
  int64_t next_id_ = 0;   // guarded by mu_
  std::thread thread_;
};

}  // namespace adctl

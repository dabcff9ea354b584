// adctld's HTTP side: /metrics (Prometheus text format), /healthz, the web page's static files
// and the JSON API (docs/web.md has every endpoint with examples):
//   GET  /api/v1/jobs[?state=RUNNING[&state=QUEUED…]&page_size=N&page_token=T]
//                                         {"jobs": [...], "next_page_token"}  (adctl.v1.Job)
//   GET  /api/v1/jobs/<id>                adctl.v1.Job (with its ranks)
//   GET  /api/v1/jobs/<id>/events         {"events": [...]}
//   GET  /api/v1/jobs/<id>/metrics[?max_points=N&after_id=M]
//                                         {"points": [...], "last_id": K}  (N per rank series)
//   GET  /api/v1/jobs/<id>/updates?after_event=E&after_metric=M[&timeout_ms=T]
//                                         long poll: {"job", "events", "points", "last_event",
//                                         "last_metric"} as soon as something is new, or at T
//   GET  /api/v1/jobs/<id>/logs?rank=R[&attempt=A&offset=N|tail_bytes=N&max_bytes=B]
//                                         {"data", "offset", "next_offset", "size", ...}
//   GET  /api/v1/jobs/<id>/checkpoints    {"checkpoints": [...]}
//   GET  /api/v1/jobs/<id>/samples[?step=N]  {"samples": [...]}  (validation samples)
//   GET  /api/v1/jobs/<id>/exports        {"exports": [...]}  (adctl export's, newest first)
//   GET  /api/v1/jobs/<id>/artifacts/<path>  a file under the job's samples/ or export/
//   POST /api/v1/jobs/<id>/cancel|pause|resume  the JobService commands (JobManager); the job
//   GET  /api/v1/devices                  {"devices": [...]}
// Errors are {"error": CODE, "message": "..."} with 400 (bad or unknown parameter), 401 (no,
// malformed or unknown token), 403 (a role too low), 404 (unknown job or route), 405 (a route
// of other methods, with `Allow`), 409 (wrong state for the command).
// With tokens configured (server/auth/access_policy.h) every /api/ route needs
// `Authorization: Bearer <token>` of a viewer (GET) or submitter (POST); /metrics and /healthz
// too with metrics_need_token; the static files stay open.
// Runs its own threads (cpp-httplib); Start/Stop from one thread.
#pragma once

#include <functional>
#include <memory>
#include <regex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/status.h"
#include "server/api/job_queries.h"
#include "server/api/motion_exports.h"
#include "server/auth/access_policy.h"
#include "server/http/connection_guard.h"
#include "server/metrics/job_metrics.h"
#include "server/supervisor/job_manager.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace adctl {

struct HttpOptions {
  std::string static_dir;  // the web page (web/dist); not served when it is not a directory
  // Who may call the JSON API (viewer: GET, submitter: POST); null or no tokens: open.
  const AccessPolicy* access = nullptr;
  bool metrics_need_token = false;  // /metrics and /healthz need a viewer's token too
  // HTTPS: PEM files (empty: plain HTTP); a client CA makes client certificates required.
  std::string tls_cert, tls_key, tls_client_ca;
  // Slow clients, connections and long polls (connection_guard.h).
  ConnectionGuardOptions connections;
  // The jobs' exports (GET …/exports); null: that route answers 500.
  const MotionExports* exports = nullptr;
};

class HttpServer {
 public:
  HttpServer(JobManager* jobs, const JobQueries* queries, JobMetrics* metrics, HttpOptions options);
  ~HttpServer();
  // Binds host:port (port 0: any free port) and serves in a background thread.
  Result<int> Start(const std::string& host, int port);
  // Returns once the handlers in flight are done: stop the supervisor first, which ends the
  // long polls.
  void Stop();

 private:
  void AddJobRoutes(httplib::Server& s);
  void AddCommandRoutes(httplib::Server& s);
  // Registers `handler` for `method` (GET or POST) on `pattern`, and records the route for
  // AllowedMethods.
  void Route(httplib::Server& s, const std::string& method, const std::string& pattern,
             std::function<void(const httplib::Request&, httplib::Response&)> handler);
  // The methods `path` has routes for ("GET, HEAD", "POST"; "" when none): a request with
  // another method is answered 405 with them as `Allow`.
  std::string AllowedMethods(const std::string& path) const;

  JobManager* const jobs_;
  const JobQueries* const queries_;
  JobMetrics* const metrics_;
  const HttpOptions options_;
  ConnectionGuard guard_;  // before server_: its task queue's threads use it
  std::unique_ptr<httplib::Server> server_;
  // Every route (method, path pattern), constant once Start has registered them.
  std::vector<std::pair<std::string, std::regex>> routes_;
  std::thread thread_;
};

}  // namespace adctl

// adctld's HTTP side: /metrics (Prometheus text format), /healthz, and a small read-only JSON
// API for the web page and scripts:
//   GET /api/v1/jobs[?state=RUNNING]     {"jobs": [...]}  (adctl.v1.Job as JSON)
//   GET /api/v1/jobs/<id>                adctl.v1.Job
//   GET /api/v1/jobs/<id>/events         {"events": [...]}
//   GET /api/v1/jobs/<id>/metrics        {"points": [...]}  (every rank, full history)
//   GET /api/v1/jobs/<id>/samples[?step=N]  {"samples": [...]}  (validation samples)
//   GET /api/v1/jobs/<id>/artifacts/<path>  a file under the job's samples/ or export/
//   GET /api/v1/devices                  {"devices": [...]}
// Static files of the web page are served from `static_dir` when it exists. Runs its own
// threads (cpp-httplib); Start/Stop from one thread.
#pragma once

#include <memory>
#include <string>
#include <thread>

#include "common/status.h"
#include "server/api/job_queries.h"
#include "server/metrics/job_metrics.h"

namespace httplib {
class Server;
}

namespace adctl {

class HttpServer {
 public:
  HttpServer(const JobQueries* queries, JobMetrics* metrics, std::string static_dir);
  ~HttpServer();
  // Binds host:port (port 0: any free port) and serves in a background thread.
  Result<int> Start(const std::string& host, int port);
  void Stop();

 private:
  const JobQueries* const queries_;
  JobMetrics* const metrics_;
  const std::string static_dir_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
};

}  // namespace adctl

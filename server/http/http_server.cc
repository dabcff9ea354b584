#include "server/http/http_server.h"

#include <httplib.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "server/api/convert.h"

namespace adctl {

namespace {

// The HTTP status of each adctl::Status code (as grpc-gateway maps the gRPC codes).
int HttpStatusOf(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return 200;
    case StatusCode::kInvalidArgument:
      return 400;
    case StatusCode::kFailedPrecondition:
      return 400;
    case StatusCode::kPermissionDenied:
      return 403;
    case StatusCode::kNotFound:
      return 404;
    case StatusCode::kAlreadyExists:
      return 409;
    case StatusCode::kUnavailable:
      return 503;
    default:
      return 500;
  }
}

void SendError(httplib::Response& res, const Status& st) {
  res.status = HttpStatusOf(st.code());
  nlohmann::json body = {{"error", StatusCodeName(st.code())}, {"message", st.message()}};
  res.set_content(body.dump(), "application/json");
}

}  // namespace

HttpServer::HttpServer(const JobQueries* queries, JobMetrics* metrics, std::string static_dir)
    : queries_(queries), metrics_(metrics), static_dir_(std::move(static_dir)) {}

HttpServer::~HttpServer() { Stop(); }

Result<int> HttpServer::Start(const std::string& host, int port) {
  server_ = std::make_unique<httplib::Server>();
  httplib::Server& s = *server_;
  s.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics_->Scrape(), prom::kPrometheusContentType);
  });
  s.Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("ok\n", "text/plain");
  });
  s.Get("/api/v1/jobs", [this](const httplib::Request& req, httplib::Response& res) {
    std::vector<JobState> states;
    if (req.has_param("state")) {
      auto st = JobStateFromName(req.get_param_value("state"));
      if (!st) return SendError(res, InvalidArgument("state: unknown state"));
      states.push_back(*st);
    }
    auto jobs = queries_->ListJobs(states, 1000);
    if (!jobs.ok()) return SendError(res, jobs.status());
    v1::ListJobsResponse out;
    for (const JobView& j : jobs.value()) JobViewToProto(j, out.add_jobs());
    res.set_content(ToJson(out), "application/json");
  });
  s.Get(R"(/api/v1/jobs/([^/]+))", [this](const httplib::Request& req, httplib::Response& res) {
    auto job = queries_->GetJob(req.matches[1], /*with_ranks=*/true);
    if (!job.ok()) return SendError(res, job.status());
    v1::Job out;
    JobViewToProto(job.value(), &out);
    res.set_content(ToJson(out), "application/json");
  });
  s.Get(R"(/api/v1/jobs/([^/]+)/events)",
        [this](const httplib::Request& req, httplib::Response& res) {
          auto events = queries_->ListEvents(req.matches[1]);
          if (!events.ok()) return SendError(res, events.status());
          v1::ListEventsResponse out;
          for (const EventRecord& e : events.value()) EventToProto(e, out.add_events());
          res.set_content(ToJson(out), "application/json");
        });
  s.Get(R"(/api/v1/jobs/([^/]+)/metrics)",
        [this](const httplib::Request& req, httplib::Response& res) {
          auto points = queries_->ListMetrics(req.matches[1]);
          if (!points.ok()) return SendError(res, points.status());
          std::string body = "{\"points\": [";
          for (size_t i = 0; i < points->size(); ++i) {
            v1::MetricPoint p;
            MetricToProto((*points)[i], &p);
            body += (i ? "," : "") + ToJson(p);
          }
          body += "]}";
          res.set_content(body, "application/json");
        });
  s.Get("/api/v1/devices", [this](const httplib::Request&, httplib::Response& res) {
    v1::ListDevicesResponse out;
    for (const DeviceStatus& d : queries_->Devices()) DeviceToProto(d, out.add_devices());
    res.set_content(ToJson(out), "application/json");
  });
  if (!static_dir_.empty() && std::filesystem::is_directory(static_dir_)) {
    s.set_mount_point("/", static_dir_);
  }
  int bound = port;
  if (port == 0) {
    bound = s.bind_to_any_port(host);
  } else if (!s.bind_to_port(host, port)) {
    bound = -1;
  }
  if (bound <= 0) {
    return Unavailable("cannot listen for HTTP on " + host + ":" + std::to_string(port));
  }
  thread_ = std::thread([this] { server_->listen_after_bind(); });
  return bound;
}

void HttpServer::Stop() {
  if (server_) server_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace adctl

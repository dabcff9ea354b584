#include "server/http/http_server.h"

#include <httplib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

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

const char* ContentTypeOf(const std::string& path) {
  const std::string ext = std::filesystem::path(path).extension().string();
  if (ext == ".mp4") return "video/mp4";
  if (ext == ".gif") return "image/gif";
  if (ext == ".json") return "application/json";
  return "application/octet-stream";
}

}  // namespace

HttpServer::HttpServer(const JobQueries* queries, JobMetrics* metrics, std::string static_dir)
    : queries_(queries), metrics_(metrics), static_dir_(std::move(static_dir)) {}

HttpServer::~HttpServer() { Stop(); }

Result<int> HttpServer::Start(const std::string& host, int port) {
  server_ = std::make_unique<httplib::Server>();
  httplib::Server& s = *server_;
  s.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics_->Scrape(), kPrometheusContentType);
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
  s.Get(R"(/api/v1/jobs/([^/]+)/samples)",
        [this](const httplib::Request& req, httplib::Response& res) {
          int64_t step = 0;
          if (req.has_param("step")) {
            try {
              step = std::stoll(req.get_param_value("step"));
            } catch (const std::exception&) {
              return SendError(res, InvalidArgument("step: expected an integer"));
            }
          }
          auto samples = queries_->ListSamples(req.matches[1], step);
          if (!samples.ok()) return SendError(res, samples.status());
          v1::ListSamplesResponse out;
          for (const SampleView& v : samples.value()) SampleToProto(v, out.add_samples());
          res.set_content(ToJson(out), "application/json");
        });
  // Artifact files (samples/…, export/…), streamed from disk.
  s.Get(R"(/api/v1/jobs/([^/]+)/artifacts/(.+))",
        [this](const httplib::Request& req, httplib::Response& res) {
          auto artifact = queries_->Artifact(req.matches[1], req.matches[2]);
          if (!artifact.ok()) return SendError(res, artifact.status());
          auto in = std::make_shared<std::ifstream>(artifact->path, std::ios::binary);
          if (!*in) return SendError(res, NotFound(artifact->relative + ": cannot be opened"));
          res.set_content_provider(
              static_cast<size_t>(artifact->size_bytes), ContentTypeOf(artifact->path),
              [in](size_t offset, size_t length, httplib::DataSink& sink) {
                std::vector<char> buffer(std::min<size_t>(length, 1 << 20));
                in->seekg(static_cast<std::streamoff>(offset));
                in->read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
                const auto got = static_cast<size_t>(in->gcount());
                return got > 0 && sink.write(buffer.data(), got);
              });
        });
  s.Get("/api/v1/devices", [this](const httplib::Request&, httplib::Response& res) {
    v1::ListDevicesResponse out;
    for (const DeviceStatus& d : queries_->Devices()) DeviceToProto(d, out.add_devices());
    res.set_content(ToJson(out), "application/json");
  });
  if (!static_dir_.empty() && std::filesystem::is_directory(static_dir_)) {
    s.set_mount_point("/", static_dir_);
  }
  // httplib's default adds SO_REUSEPORT, which lets a second daemon share a taken port.
  s.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  int bound = port;
  if (port == 0) {
    bound = s.bind_to_any_port(host);
  } else if (!s.bind_to_port(host, port)) {
    bound = -1;
  }
  if (bound <= 0) {
    return Unavailable("--http " + host + ":" + std::to_string(port) +
                       ": cannot listen for HTTP there (is the port taken, e.g. by another "
                       "adctld?)");
  }
  thread_ = std::thread([this] { server_->listen_after_bind(); });
  return bound;
}

void HttpServer::Stop() {
  if (server_) server_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace adctl

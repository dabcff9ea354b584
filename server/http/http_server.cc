#include "server/http/http_server.h"

#include <google/protobuf/util/json_util.h>
#include <httplib.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "server/grpc/convert.h"

namespace adctl {

namespace {

std::string ToJson(const google::protobuf::Message& message) {
  std::string out;
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;
  (void)google::protobuf::util::MessageToJsonString(message, &out, options);
  return out;
}

void SendError(httplib::Response& res, const Status& st) {
  res.status = st.code() == StatusCode::kNotFound          ? 404
               : st.code() == StatusCode::kInvalidArgument ? 400
                                                           : 500;
  nlohmann::json body = {{"error", StatusCodeName(st.code())}, {"message", st.message()}};
  res.set_content(body.dump(), "application/json");
}

}  // namespace

HttpServer::HttpServer(Supervisor* supervisor, JobMetrics* metrics, std::string static_dir)
    : supervisor_(supervisor), metrics_(metrics), static_dir_(std::move(static_dir)) {}

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
    auto jobs = supervisor_->store()->ListJobs(states, 1000);
    if (!jobs.ok()) return SendError(res, jobs.status());
    v1::ListJobsResponse out;
    for (const JobRecord& j : jobs.value()) {
      JobToProto(j, supervisor_->WaitReason(j.id), out.add_jobs());
    }
    res.set_content(ToJson(out), "application/json");
  });
  s.Get(R"(/api/v1/jobs/([^/]+))", [this](const httplib::Request& req, httplib::Response& res) {
    auto job = supervisor_->store()->GetJob(req.matches[1]);
    if (!job.ok()) return SendError(res, job.status());
    v1::Job out;
    JobToProto(job.value(), supervisor_->WaitReason(job->id), &out);
    std::map<int, bool> alive;
    RanksToProto(supervisor_->LiveRanks(job->id, &alive), alive, &out);
    res.set_content(ToJson(out), "application/json");
  });
  s.Get(R"(/api/v1/jobs/([^/]+)/events)",
        [this](const httplib::Request& req, httplib::Response& res) {
          auto events = supervisor_->store()->ListEvents(req.matches[1], 0);
          if (!events.ok()) return SendError(res, events.status());
          v1::ListEventsResponse out;
          for (const EventRecord& e : events.value()) EventToProto(e, out.add_events());
          res.set_content(ToJson(out), "application/json");
        });
  s.Get(R"(/api/v1/jobs/([^/]+)/metrics)",
        [this](const httplib::Request& req, httplib::Response& res) {
          auto points = supervisor_->store()->ListMetrics(req.matches[1], 0);
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
    for (const DeviceStatus& d : supervisor_->Devices()) {
      v1::Device* p = out.add_devices();
      p->set_name(d.device.name);
      p->set_kind(d.device.kind);
      p->set_model(d.device.model);
      p->set_uuid(d.device.uuid);
      p->set_memory_total_bytes(d.device.memory_total_bytes);
      p->set_memory_used_bytes(d.device.memory_used_bytes);
      p->set_job_id(d.job_id);
    }
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

#include "server/http/http_server.h"

#include <httplib.h>
#include <strings.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <vector>

#include "server/api/convert.h"

namespace adctl {

namespace {

constexpr int kDefaultPollMs = 25000;
constexpr int kMaxPollMs = 60000;
constexpr int64_t kDefaultLogBytes = 64 * 1024;
constexpr int64_t kMaxLogBytes = 1 << 20;
// A request body (a command's JSON) is small: larger ones are answered 413 unread.
constexpr size_t kMaxBodyBytes = 1 << 20;

// The HTTP status of each adctl::Status code (as grpc-gateway maps the gRPC codes, except
// FailedPrecondition: a command on a job in the wrong state is a conflict with its state, 409).
int HttpStatusOf(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return 200;
    case StatusCode::kInvalidArgument:
      return 400;
    case StatusCode::kFailedPrecondition:
      return 409;
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

void SendJson(httplib::Response& res, const nlohmann::json& body) {
  // Log bytes need not be UTF-8: invalid sequences become U+FFFD instead of throwing.
  res.set_content(body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace),
                  "application/json");
}

void SendError(httplib::Response& res, int http_status, const std::string& code,
               const std::string& message) {
  res.status = http_status;
  SendJson(res, {{"error", code}, {"message", message}});
}

void SendError(httplib::Response& res, const Status& st) {
  SendError(res, HttpStatusOf(st.code()), StatusCodeName(st.code()), st.message());
}

const char* ContentTypeOf(const std::string& path) {
  const std::string ext = std::filesystem::path(path).extension().string();
  if (ext == ".mp4") return "video/mp4";
  if (ext == ".gif") return "image/gif";
  if (ext == ".png") return "image/png";
  if (ext == ".json") return "application/json";
  return "application/octet-stream";
}

// 400 naming the first query parameter of `req` its route does not take (a typo would otherwise
// be ignored silently), or one that only a list may repeat given twice.
Status KnownParams(const httplib::Request& req, std::initializer_list<const char*> known,
                   std::initializer_list<const char*> repeatable = {}) {
  for (const auto& [name, value] : req.params) {
    const bool listed = std::any_of(known.begin(), known.end(),
                                    [&name = name](const char* k) { return name == k; });
    if (!listed) {
      std::string takes;
      for (const char* k : known) takes += (takes.empty() ? "" : ", ") + std::string(k);
      return InvalidArgument(name + ": unknown parameter (" +
                             (takes.empty() ? "this route takes none" : "known: " + takes) + ")");
    }
    const bool repeats = std::any_of(repeatable.begin(), repeatable.end(),
                                     [&name = name](const char* k) { return name == k; });
    if (!repeats && req.get_param_value_count(name) > 1) {
      return InvalidArgument(name + ": given " + std::to_string(req.get_param_value_count(name)) +
                             " times; give it once");
    }
  }
  return Status::Ok();
}

// An integer query parameter in [min, max]; `fallback` when absent.
Result<int64_t> IntParam(const httplib::Request& req, const std::string& name, int64_t fallback,
                         int64_t min, int64_t max) {
  if (!req.has_param(name)) return fallback;
  const std::string text = req.get_param_value(name);
  int64_t value = 0;
  try {
    size_t used = 0;
    value = std::stoll(text, &used);
    if (used != text.size()) throw std::invalid_argument(text);
  } catch (const std::exception&) {
    return InvalidArgument(name + ": expected an integer, got '" + text + "'");
  }
  if (value < min || value > max) {
    return InvalidArgument(name + ": must be in [" + std::to_string(min) + ", " +
                           std::to_string(max) + "], got " + text);
  }
  return value;
}

// The request body of a command as a JSON object ({} when empty).
Result<nlohmann::json> JsonBody(const httplib::Request& req) {
  if (req.body.empty()) return nlohmann::json::object();
  auto body = nlohmann::json::parse(req.body, nullptr, /*allow_exceptions=*/false);
  if (!body.is_object()) return InvalidArgument("body: expected a JSON object");
  return body;
}

// An optional JSON number field of a command body (its range is JobManager's).
Result<std::optional<double>> OptionalSeconds(const nlohmann::json& body, const char* name) {
  if (!body.contains(name) || body[name].is_null()) return std::optional<double>();
  if (!body[name].is_number()) return InvalidArgument(std::string(name) + ": expected a number");
  return std::optional<double>(body[name].get<double>());
}

// Who makes a command: the name of the token it carries (the pre-routing check let it in) and
// whether it may act only on its own jobs.
// The token name of a request that passed its route's role check ("owner" without tokens).
std::string CallerName(const httplib::Request& req, const AccessPolicy* access) {
  if (access == nullptr || !access->enabled()) return "owner";
  return access->CheckAuthorization(req.get_header_value("Authorization"), Role::kViewer).who;
}

Requester Caller(const httplib::Request& req, const AccessPolicy* access) {
  if (access == nullptr || !access->enabled()) return {};
  const AccessDecision d =
      access->CheckAuthorization(req.get_header_value("Authorization"), Role::kSubmitter);
  return Requester(d.who, d.own_jobs_only);
}

// cpp-httplib (Debian's, built with brotli) answers in brotli whenever a client accepts it
// (browsers do), at brotli's default quality 11: 0.47 s of CPU for a 442 KB metrics answer,
// against 0.017 s for gzip at 86 % of brotli's compression
// (bench/results/compare_view_cpu_20261205.md). Taking `br` out of the request's
// Accept-Encoding makes it choose gzip for every answer (JSON, /metrics, the page's files).
// Handlers see the request as const; the object itself is httplib's own, not const, so the
// header is rewritten in place before any handler reads it.
void PreferGzip(const httplib::Request& req) {
  auto& headers = const_cast<httplib::Request&>(req).headers;
  auto it = headers.find("Accept-Encoding");
  if (it == headers.end()) return;
  std::string kept;
  std::stringstream codings(it->second);
  for (std::string coding; std::getline(codings, coding, ',');) {
    const size_t begin = coding.find_first_not_of(" \t");
    if (begin == std::string::npos) continue;
    const std::string name = coding.substr(begin, coding.find_first_of(" \t;", begin) - begin);
    if (strcasecmp(name.c_str(), "br") == 0) continue;
    kept += (kept.empty() ? "" : ", ") + coding.substr(begin);
  }
  it->second = kept;
}

// A JSON array of metric points (adctl.v1.MetricPoint each).
std::string PointsArray(const std::vector<MetricRecord>& points) {
  std::string out = "[";
  for (size_t i = 0; i < points.size(); ++i) {
    v1::MetricPoint p;
    MetricToProto(points[i], &p);
    out += (i ? "," : "") + ToJson(p);
  }
  return out + "]";
}

std::string EventsArray(const std::vector<EventRecord>& events) {
  std::string out = "[";
  for (size_t i = 0; i < events.size(); ++i) {
    v1::Event e;
    EventToProto(events[i], &e);
    out += (i ? "," : "") + ToJson(e);
  }
  return out + "]";
}

}  // namespace

HttpServer::HttpServer(JobManager* jobs, const JobQueries* queries, JobMetrics* metrics,
                       HttpOptions options)
    : jobs_(jobs),
      queries_(queries),
      metrics_(metrics),
      options_(std::move(options)),
      guard_(options_.connections) {}

HttpServer::~HttpServer() { Stop(); }

Result<int> HttpServer::Start(const std::string& host, int port) {
  if (!options_.tls_cert.empty()) {
    // HTTPS with the gRPC side's certificate (and client CA, when adctld requires client certs).
    auto tls = std::make_unique<httplib::SSLServer>(
        options_.tls_cert.c_str(), options_.tls_key.c_str(),
        options_.tls_client_ca.empty() ? nullptr : options_.tls_client_ca.c_str());
    if (!tls->is_valid()) {
      return InvalidArgument("--tls-cert " + options_.tls_cert + " / --tls-key " +
                             options_.tls_key + ": not a usable certificate and key for HTTPS");
    }
    server_ = std::move(tls);
  } else {
    server_ = std::make_unique<httplib::Server>();
  }
  httplib::Server& s = *server_;
  // A thread per connection, slow requests cut off, long polls bounded (connection_guard.h).
  s.new_task_queue = [this] { return guard_.NewTaskQueue(); };
  s.set_payload_max_length(kMaxBodyBytes);
  s.set_logger(
      [this](const httplib::Request&, const httplib::Response&) { guard_.AnswerWritten(); });
  const bool check_tokens = options_.access != nullptr && options_.access->enabled();
  // A request without a body has arrived whole when it is routed; a command (POST) once its
  // handler runs (its body read).
  s.set_pre_routing_handler(
      [this, check_tokens](const httplib::Request& req, httplib::Response& res) {
        if (req.method != "POST") guard_.RequestArrived(req);
        PreferGzip(req);
        // A body over the limit is answered 413 before it is read (cpp-httplib's own check
        // reads and drops it first, waiting out a client that never sends it).
        if (req.get_header_value<uint64_t>("Content-Length") > kMaxBodyBytes) {
          res.set_header("Connection", "close");
          SendError(res, 413, "INVALID_ARGUMENT",
                    req.method + " " + req.path + ": request body over " +
                        std::to_string(kMaxBodyBytes) + " bytes");
          return httplib::Server::HandlerResponse::Handled;
        }
        if (!check_tokens) return httplib::Server::HandlerResponse::Unhandled;
        {
          // The JSON API as JobService: reads need a viewer, commands (POST) a submitter; /metrics
          // and /healthz only with --metrics-auth token; the page's files stay open (no data).
          const bool api = req.path.rfind("/api/", 0) == 0;
          const bool scrape = req.path == "/metrics" || req.path == "/healthz";
          if (!api && !(scrape && options_.metrics_need_token)) {
            return httplib::Server::HandlerResponse::Unhandled;
          }
          const Role needed =
              req.method == "GET" || req.method == "HEAD" ? Role::kViewer : Role::kSubmitter;
          const AccessDecision d =
              options_.access->CheckAuthorization(req.get_header_value("Authorization"), needed);
          if (d.allowed()) return httplib::Server::HandlerResponse::Unhandled;
          if (d.kind == AccessDecision::Kind::kUnauthenticated) {
            res.set_header("WWW-Authenticate", "Bearer");
            SendError(res, 401, "UNAUTHENTICATED", d.message);
          } else {
            SendError(res, 403, "PERMISSION_DENIED", d.message);
          }
          return httplib::Server::HandlerResponse::Handled;
        }
      });
  // Errors cpp-httplib answers itself under /api/ (no route, a malformed request) are JSON too.
  s.set_error_handler(httplib::Server::HandlerWithResponse([this](const httplib::Request& req,
                                                                  httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    const std::string what = req.method + " " + req.path + ": ";
    // A route that exists for other methods: 405 with the methods it takes.
    if (const std::string allow = AllowedMethods(req.path); res.status == 404 && !allow.empty()) {
      res.set_header("Allow", allow);
      const std::string message = what + "this route takes " + allow;
      if (req.path.rfind("/api/", 0) == 0) {
        SendError(res, 405, "UNIMPLEMENTED", message);
      } else {
        res.status = 405;
        res.set_content(message + "\n", "text/plain");
      }
      return httplib::Server::HandlerResponse::Handled;
    }
    if (req.path.rfind("/api/", 0) != 0) return httplib::Server::HandlerResponse::Unhandled;
    if (res.status == 404) {
      SendError(res, 404, "NOT_FOUND", what + "no such API route");
    } else if (res.status == 413) {
      SendError(res, 413, "INVALID_ARGUMENT",
                what + "request body over " + std::to_string(kMaxBodyBytes) + " bytes");
    } else if (res.status == 400) {
      SendError(res, 400, "INVALID_ARGUMENT",
                what + "malformed request (a POST needs a body or Content-Length: 0)");
    } else {
      SendError(res, res.status, "ERROR", what + "HTTP " + std::to_string(res.status));
    }
    return httplib::Server::HandlerResponse::Handled;
  }));
  Route(s, "GET", "/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics_->Scrape(), kPrometheusContentType);
  });
  Route(s, "GET", "/healthz", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("ok\n", "text/plain");
  });
  AddJobRoutes(s);
  AddCommandRoutes(s);
  Route(s, "GET", "/api/v1/devices", [this](const httplib::Request& req, httplib::Response& res) {
    if (Status known = KnownParams(req, {}); !known.ok()) return SendError(res, known);
    v1::ListDevicesResponse out;
    for (const DeviceStatus& d : queries_->Devices()) DeviceToProto(d, out.add_devices());
    res.set_content(ToJson(out), "application/json");
  });
  if (!options_.static_dir.empty() && std::filesystem::is_directory(options_.static_dir)) {
    s.set_mount_point("/", options_.static_dir);
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
  guard_.Start(bound);
  thread_ = std::thread([this] { server_->listen_after_bind(); });
  return bound;
}

void HttpServer::AddJobRoutes(httplib::Server& s) {
  Route(s, "GET", "/api/v1/jobs", [this](const httplib::Request& req, httplib::Response& res) {
    Status known =
        KnownParams(req, {"state", "page_size", "page_token", "label", "mine"}, {"state", "label"});
    if (!known.ok()) return SendError(res, known);
    // ?label=k=v (repeatable): jobs with every one; ?mine=1: the caller's token's jobs.
    JobSelector selector;
    for (size_t i = 0; i < req.get_param_value_count("label"); ++i) {
      const std::string pair = req.get_param_value("label", i);
      const size_t eq = pair.find('=');
      if (eq == std::string::npos) {
        return SendError(
            res, InvalidArgument("label: expected key=value, got '" + pair.substr(0, 80) + "'"));
      }
      selector.labels[pair.substr(0, eq)] = pair.substr(eq + 1);
    }
    auto mine = IntParam(req, "mine", 0, 0, 1);
    if (!mine.ok()) return SendError(res, mine.status());
    if (mine.value() == 1) selector.submitted_by = CallerName(req, options_.access);
    // ?state=A&state=B: jobs in any of them, as JobService.ListJobs' repeated states.
    std::vector<JobState> states;
    for (size_t i = 0; i < req.get_param_value_count("state"); ++i) {
      const std::string name = req.get_param_value("state", i);
      auto st = JobStateFromName(name);
      if (!st) return SendError(res, InvalidArgument("state: unknown state '" + name + "'"));
      states.push_back(*st);
    }
    // Paged as JobService.ListJobs, one rule for both (JobQueries::ListJobPage): ?page_size=N
    // (0 or absent: 100; over 1000: 1000)&page_token=T.
    auto page_size = IntParam(req, "page_size", 0, 0, std::numeric_limits<int32_t>::max());
    if (!page_size.ok()) return SendError(res, page_size.status());
    auto page = queries_->ListJobPage(states, static_cast<int>(page_size.value()),
                                      req.get_param_value("page_token"), selector);
    if (!page.ok()) return SendError(res, page.status());
    v1::ListJobsResponse out;
    for (const JobView& j : page->jobs) JobViewToProto(j, out.add_jobs());
    out.set_next_page_token(page->next_page_token);
    res.set_content(ToJson(out), "application/json");
  });
  Route(s, "GET", R"(/api/v1/jobs/([^/]+))",
        [this](const httplib::Request& req, httplib::Response& res) {
          if (Status known = KnownParams(req, {}); !known.ok()) return SendError(res, known);
          auto job = queries_->GetJob(req.matches[1], /*with_ranks=*/true);
          if (!job.ok()) return SendError(res, job.status());
          v1::Job out;
          JobViewToProto(job.value(), &out);
          res.set_content(ToJson(out), "application/json");
        });
  Route(s, "GET", R"(/api/v1/jobs/([^/]+)/events)",
        [this](const httplib::Request& req, httplib::Response& res) {
          if (Status known = KnownParams(req, {}); !known.ok()) return SendError(res, known);
          auto events = queries_->ListEvents(req.matches[1]);
          if (!events.ok()) return SendError(res, events.status());
          v1::ListEventsResponse out;
          for (const EventRecord& e : events.value()) EventToProto(e, out.add_events());
          res.set_content(ToJson(out), "application/json");
        });
  Route(s, "GET", R"(/api/v1/jobs/([^/]+)/metrics)",
        [this](const httplib::Request& req, httplib::Response& res) {
          if (Status known = KnownParams(req, {"max_points", "after_id"}); !known.ok()) {
            return SendError(res, known);
          }
          auto max_points =
              IntParam(req, "max_points", kDefaultMetricPointsPerRank, 1, kMaxMetricPointsPerRank);
          if (!max_points.ok()) return SendError(res, max_points.status());
          auto after_id = IntParam(req, "after_id", 0, 0, std::numeric_limits<int64_t>::max());
          if (!after_id.ok()) return SendError(res, after_id.status());
          auto points =
              queries_->ListMetrics(req.matches[1], *after_id, static_cast<int>(*max_points));
          if (!points.ok()) return SendError(res, points.status());
          int64_t last_id = *after_id;
          for (const MetricRecord& m : points.value()) last_id = std::max(last_id, m.id);
          res.set_content("{\"points\": " + PointsArray(points.value()) +
                              ", \"last_id\": " + std::to_string(last_id) + "}",
                          "application/json");
        });
  Route(s, "GET", R"(/api/v1/jobs/([^/]+)/updates)",
        [this](const httplib::Request& req, httplib::Response& res) {
          Status known = KnownParams(req, {"after_event", "after_metric", "timeout_ms"});
          if (!known.ok()) return SendError(res, known);
          const int64_t max_id = std::numeric_limits<int64_t>::max();
          auto after_event = IntParam(req, "after_event", 0, 0, max_id);
          if (!after_event.ok()) return SendError(res, after_event.status());
          auto after_metric = IntParam(req, "after_metric", 0, 0, max_id);
          if (!after_metric.ok()) return SendError(res, after_metric.status());
          auto timeout_ms = IntParam(req, "timeout_ms", kDefaultPollMs, 0, kMaxPollMs);
          if (!timeout_ms.ok()) return SendError(res, timeout_ms.status());
          if (!guard_.TryStartLongPoll()) {
            res.set_header("Retry-After", "1");
            return SendError(res, 503, "UNAVAILABLE",
                             "too many long polls in flight; retry (or poll with timeout_ms=0)");
          }
          // A poll whose client left ends then, not at its timeout.
          WatchCursor cursor{*after_event, *after_metric};
          auto batch =
              queries_->WaitForUpdates(req.matches[1], &cursor, static_cast<int>(*timeout_ms),
                                       [this] { return guard_.ClientGone(); });
          guard_.EndLongPoll();
          if (!batch.ok()) return SendError(res, batch.status());
          v1::Job job;
          JobViewToProto(batch->job, &job);
          res.set_content("{\"job\": " + ToJson(job) +
                              ", \"events\": " + EventsArray(batch->events) +
                              ", \"points\": " + PointsArray(batch->metrics) +
                              ", \"last_event\": " + std::to_string(cursor.last_event_id) +
                              ", \"last_metric\": " + std::to_string(cursor.last_metric_id) + "}",
                          "application/json");
        });
  Route(s, "GET", R"(/api/v1/jobs/([^/]+)/logs)",
        [this](const httplib::Request& req, httplib::Response& res) {
          Status known = KnownParams(req, {"rank", "attempt", "offset", "tail_bytes", "max_bytes"});
          if (!known.ok()) return SendError(res, known);
          // tail_bytes=N: the last N bytes (as StreamLogs' tail_bytes), instead of an offset.
          auto tail_bytes = IntParam(req, "tail_bytes", 0, 0, std::numeric_limits<int64_t>::max());
          if (!tail_bytes.ok()) return SendError(res, tail_bytes.status());
          if (req.has_param("tail_bytes") && req.has_param("offset")) {
            return SendError(res,
                             InvalidArgument("tail_bytes: give offset or tail_bytes, not both"));
          }
          auto view = queries_->GetJob(req.matches[1], /*with_ranks=*/false);
          if (!view.ok()) return SendError(res, view.status());
          const JobRecord& job = view->job;
          auto rank = IntParam(req, "rank", 0, 0, std::numeric_limits<int>::max());
          if (!rank.ok()) return SendError(res, rank.status());
          auto attempt = IntParam(req, "attempt", 0, 0, std::numeric_limits<int>::max());
          if (!attempt.ok()) return SendError(res, attempt.status());
          auto offset = IntParam(req, "offset", 0, 0, std::numeric_limits<int64_t>::max());
          if (!offset.ok()) return SendError(res, offset.status());
          auto max_bytes = IntParam(req, "max_bytes", kDefaultLogBytes, 1, kMaxLogBytes);
          if (!max_bytes.ok()) return SendError(res, max_bytes.status());
          Status ref =
              JobQueries::CheckRankLogRef(job, static_cast<int>(*attempt), static_cast<int>(*rank));
          if (!ref.ok()) return SendError(res, ref);
          const int chosen = *attempt == 0 ? job.attempt : static_cast<int>(*attempt);
          nlohmann::json out = {{"attempt", chosen}, {"rank", *rank},    {"exists", false},
                                {"offset", *offset}, {"next_offset", 0}, {"size", 0},
                                {"data", ""}};
          if (chosen > 0) {
            LogRead read = queries_->ReadRankLog(job, chosen, static_cast<int>(*rank), *offset,
                                                 static_cast<size_t>(*max_bytes), *tail_bytes);
            out["exists"] = read.exists;
            out["offset"] = read.offset;
            out["size"] = read.size;
            out["next_offset"] = read.offset + static_cast<int64_t>(read.data.size());
            out["data"] = std::move(read.data);
          }
          out["job_state"] = JobStateName(job.state);
          SendJson(res, out);
        });
  Route(s, "GET", R"(/api/v1/jobs/([^/]+)/checkpoints)",
        [this](const httplib::Request& req, httplib::Response& res) {
          if (Status known = KnownParams(req, {}); !known.ok()) return SendError(res, known);
          auto checkpoints = queries_->ListCheckpoints(req.matches[1]);
          if (!checkpoints.ok()) return SendError(res, checkpoints.status());
          v1::ListCheckpointsResponse out;
          for (const CheckpointView& c : checkpoints.value()) {
            CheckpointToProto(c, out.add_checkpoints());
          }
          res.set_content(ToJson(out), "application/json");
        });
  Route(s, "GET", R"(/api/v1/jobs/([^/]+)/samples)",
        [this](const httplib::Request& req, httplib::Response& res) {
          if (Status known = KnownParams(req, {"step"}); !known.ok()) return SendError(res, known);
          auto step = IntParam(req, "step", 0, 0, std::numeric_limits<int64_t>::max());
          if (!step.ok()) return SendError(res, step.status());
          auto samples = queries_->ListSamples(req.matches[1], *step);
          if (!samples.ok()) return SendError(res, samples.status());
          v1::ListSamplesResponse out;
          for (const SampleView& v : samples.value()) SampleToProto(v, out.add_samples());
          res.set_content(ToJson(out), "application/json");
        });
  Route(s, "GET", R"(/api/v1/jobs/([^/]+)/exports)",
        [this](const httplib::Request& req, httplib::Response& res) {
          if (Status known = KnownParams(req, {}); !known.ok()) return SendError(res, known);
          if (options_.exports == nullptr) {
            return SendError(res, Internal("exports are not served by this adctld"));
          }
          auto exports = options_.exports->List(req.matches[1]);
          if (!exports.ok()) return SendError(res, exports.status());
          v1::ListExportsResponse out;
          for (const MotionExport& e : exports.value()) ExportToProto(e, out.add_exports());
          res.set_content(ToJson(out), "application/json");
        });
  // Artifact files (samples/…, export/…), streamed from disk.
  Route(s, "GET", R"(/api/v1/jobs/([^/]+)/artifacts/(.+))",
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
}

void HttpServer::AddCommandRoutes(httplib::Server& s) {
  // The commands answer the job as JobService does (JobToProto of JobManager's record).
  auto reply = [](httplib::Response& res, const Result<JobRecord>& job) {
    if (!job.ok()) return SendError(res, job.status());
    v1::Job out;
    JobToProto(job.value(), "", &out);
    res.set_content(ToJson(out), "application/json");
  };
  Route(s, "POST", R"(/api/v1/jobs/([^/]+)/cancel)",
        [this, reply](const httplib::Request& req, httplib::Response& res) {
          guard_.RequestArrived(req);
          auto body = JsonBody(req);
          if (!body.ok()) return SendError(res, body.status());
          auto grace = OptionalSeconds(*body, "grace_seconds");
          if (!grace.ok()) return SendError(res, grace.status());
          bool force = false;
          if (body->contains("force")) {
            if (!(*body)["force"].is_boolean()) {
              return SendError(res, InvalidArgument("force: expected true or false"));
            }
            force = (*body)["force"].get<bool>();
          }
          reply(res, jobs_->Cancel(req.matches[1], *grace, force, Caller(req, options_.access)));
        });
  Route(s, "POST", R"(/api/v1/jobs/([^/]+)/pause)",
        [this, reply](const httplib::Request& req, httplib::Response& res) {
          guard_.RequestArrived(req);
          auto body = JsonBody(req);
          if (!body.ok()) return SendError(res, body.status());
          auto grace = OptionalSeconds(*body, "grace_seconds");
          if (!grace.ok()) return SendError(res, grace.status());
          reply(res, jobs_->Pause(req.matches[1], *grace, Caller(req, options_.access)));
        });
  Route(s, "POST", R"(/api/v1/jobs/([^/]+)/resume)",
        [this, reply](const httplib::Request& req, httplib::Response& res) {
          guard_.RequestArrived(req);
          auto body = JsonBody(req);
          if (!body.ok()) return SendError(res, body.status());
          std::optional<int> gpus;
          if (body->contains("gpus")) {
            if (!(*body)["gpus"].is_number_integer()) {
              return SendError(res, InvalidArgument("gpus: expected an integer"));
            }
            gpus = (*body)["gpus"].get<int>();
          }
          reply(res, jobs_->Resume(req.matches[1], gpus, Caller(req, options_.access)));
        });
  Route(s, "POST", R"(/api/v1/jobs/([^/]+)/priority)",
        [this, reply](const httplib::Request& req, httplib::Response& res) {
          guard_.RequestArrived(req);
          auto body = JsonBody(req);
          if (!body.ok()) return SendError(res, body.status());
          if (!body->contains("priority") || !(*body)["priority"].is_number_integer()) {
            return SendError(res, InvalidArgument("priority: expected an integer"));
          }
          const int64_t priority = (*body)["priority"].get<int64_t>();
          if (priority < INT32_MIN || priority > INT32_MAX) {
            return SendError(res, InvalidArgument("priority: out of range"));
          }
          reply(res, jobs_->SetPriority(req.matches[1], static_cast<int>(priority),
                                        Caller(req, options_.access)));
        });
  Route(s, "POST", R"(/api/v1/jobs/([^/]+)/checkpoints/(\d{1,18})/(pin|unpin))",
        [this](const httplib::Request& req, httplib::Response& res) {
          guard_.RequestArrived(req);
          auto body = JsonBody(req);
          if (!body.ok()) return SendError(res, body.status());
          auto pins = jobs_->PinCheckpoint(req.matches[1], std::stoll(req.matches[2]),
                                           req.matches[3] == "pin", Caller(req, options_.access));
          if (!pins.ok()) return SendError(res, pins.status());
          v1::PinCheckpointResponse out;
          for (int64_t step : *pins) out.add_pinned_steps(step);
          res.set_content(ToJson(out), "application/json");
        });
}

void HttpServer::Route(httplib::Server& s, const std::string& method, const std::string& pattern,
                       std::function<void(const httplib::Request&, httplib::Response&)> handler) {
  routes_.emplace_back(method, std::regex(pattern));
  if (method == "GET") {
    s.Get(pattern, std::move(handler));
  } else {
    s.Post(pattern, std::move(handler));
  }
}

std::string HttpServer::AllowedMethods(const std::string& path) const {
  std::string allow;
  for (const auto& [method, pattern] : routes_) {
    if (!std::regex_match(path, pattern)) continue;
    const std::string methods = method == "GET" ? "GET, HEAD" : method;
    if (allow.find(methods) == std::string::npos) allow += (allow.empty() ? "" : ", ") + methods;
  }
  return allow;
}

void HttpServer::Stop() {
  if (server_) server_->stop();
  if (thread_.joinable()) thread_.join();
  guard_.Stop();
}

}  // namespace adctl

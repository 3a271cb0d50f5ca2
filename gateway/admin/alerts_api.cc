// Monitors, alerts and notification channels over the alerting module (alerting.h):
// /api/monitors[/{id}], /api/alerts, /api/channels and /api/channels/{name}/test. Without
// alerting configured every such path is a 404.
#include <algorithm>

#include "gateway/admin/admin_api.h"
#include "gateway/admin/query_params.h"
#include "gateway/alerting.h"
#include "gateway/answers.h"
#include "gateway/run_blocking.h"

namespace kvgate::gateway {
namespace {

using nlohmann::json;
namespace asio = boost::asio;

constexpr std::string_view kJson = "application/json";

}  // namespace

asio::awaitable<void> AdminApi::HandleAlerts(http::Request& request, http::ResponseWriter& writer) {
  if (deps_.alerting == nullptr) {
    co_await writer.Send(
        404, kJson, ErrorJson("alerting is not configured", "invalid_request_error", "not_found"));
    co_return;
  }
  Alerting& alerting = *deps_.alerting;
  const std::string& path = request.path;
  const std::string& method = request.method;
  const bool get = IsGet(method);
  json body;
  if ((method == "POST" || method == "PUT") && !request.body.empty()) {
    body = json::parse(request.body, nullptr, false);
    if (body.is_discarded() || !body.is_object()) {
      co_await writer.Send(
          400, kJson,
          ErrorJson("the body must be a JSON object", "invalid_request_error", "invalid_json"));
      co_return;
    }
  }
  boost::asio::thread_pool& pool = *deps_.blocking_pool;
  auto run = [&pool](auto fn) { return RunBlocking(pool, std::move(fn)); };
  const std::string monitors_prefix = "/api/monitors/";
  const std::string id = path.rfind(monitors_prefix, 0) == 0
                             ? http::PercentDecode(path.substr(monitors_prefix.size()))
                             : std::string();
  Result<json> result =
      MakeError(ErrorCode::kNotFound, "Invalid URL (" + method + " " + path + ")");
  int ok_status = 200;
  std::string allow;  // set when the path exists but not with this method
  if (path == "/api/monitors") {
    if (get) {
      result = co_await run([&alerting] { return alerting.ListMonitors(); });
    } else if (method == "POST") {
      ok_status = 201;
      result = co_await run([&alerting, &body] { return alerting.CreateMonitor(body); });
    } else {
      allow = "GET, HEAD, POST";
    }
  } else if (!id.empty()) {
    if (get) {
      result = co_await run([&alerting, &id] { return alerting.GetMonitor(id); });
    } else if (method == "PUT") {
      result = co_await run([&alerting, &id, &body] { return alerting.UpdateMonitor(id, body); });
    } else if (method == "DELETE") {
      result = co_await run([&alerting, &id] { return alerting.DeleteMonitor(id); });
    } else {
      allow = "GET, HEAD, PUT, DELETE";
    }
  } else if (path == "/api/alerts") {
    auto limit = admin::IntParam(request, "limit");
    if (!get) {
      allow = "GET, HEAD";
    } else if (!limit) {
      result = std::unexpected(limit.error());
    } else {
      int n = static_cast<int>(std::clamp<int64_t>(limit->value_or(100), 1, 1000));
      result = co_await run([&alerting, n] { return alerting.ListAlerts(n); });
    }
  } else if (path == "/api/channels") {
    if (get) {
      result = co_await run([&alerting] { return alerting.ListChannels(); });
    } else {
      allow = "GET, HEAD";
    }
  } else if (path.rfind("/api/channels/", 0) == 0 && path.size() > 19 &&
             path.compare(path.size() - 5, 5, "/test") == 0) {
    const std::string channel = http::PercentDecode(path.substr(14, path.size() - 14 - 5));
    if (method == "POST") {
      ok_status = 202;
      result = co_await run([&alerting, &channel] { return alerting.TestFire(channel); });
    } else {
      allow = "POST";
    }
  }
  if (!allow.empty()) {
    co_await SendMethodNotAllowed(writer, request, std::move(allow));
    co_return;
  }
  co_await SendResult(writer, result, ok_status);
}

}  // namespace kvgate::gateway

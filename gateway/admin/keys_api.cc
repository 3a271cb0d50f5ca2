// The gateway keys' admin API over VirtualKeys (virtual_keys.h): GET and POST /api/keys, GET and
// DELETE /api/keys/{id}, POST /api/keys/{id}/rotate. Writes run on the blocking pool (a key
// store may be a database); reads are the in-memory table's.
#include <string>
#include <vector>

#include "common/utf8.h"
#include "gateway/admin/admin_api.h"
#include "gateway/run_blocking.h"

namespace kvgate::gateway {
namespace {

using nlohmann::json;
namespace asio = boost::asio;

}  // namespace

asio::awaitable<AdminApi::ApiAnswer> AdminApi::HandleKeys(const http::Request& request) {
  const std::string& method = request.method;
  const bool get = method == "GET" || method == "HEAD";
  const std::string prefix = "/api/keys/";
  std::string id = request.path.rfind(prefix, 0) == 0
                       ? http::PercentDecode(request.path.substr(prefix.size()))
                       : std::string();
  bool rotate = false;
  if (const std::string suffix = "/rotate";
      id.size() > suffix.size() &&
      id.compare(id.size() - suffix.size(), suffix.size(), suffix) == 0) {
    id.resize(id.size() - suffix.size());
    rotate = true;
  }
  ApiAnswer answer;
  VirtualKeys& keys = *deps_.keys;
  boost::asio::thread_pool& pool = *deps_.blocking_pool;
  auto run = [&pool](auto fn) { return RunBlocking(pool, std::move(fn)); };
  if (request.path == "/api/keys") {
    if (get) {
      answer.result = keys.List();
    } else if (method == "POST") {
      json body = request.body.empty() ? json::object() : json::parse(request.body, nullptr, false);
      std::vector<std::string> models;  // what an allow-list may name
      for (const router::Target& t : deps_.router->targets()) models.push_back(t.name);
      for (const router::RouterConfig& r : deps_.router->routers()) models.push_back(r.name);
      if (body.is_discarded() || !body.is_object()) {
        answer.result = MakeError(ErrorCode::kInvalidArgument, "the body must be a JSON object");
      } else {
        answer.ok_status = 201;
        answer.result = co_await run([&keys, &body, &models] { return keys.Create(body, models); });
      }
    } else {
      answer.allow = "GET, HEAD, POST";
    }
  } else if (id.empty() || id.find('/') != std::string::npos) {
    answer.result = MakeError(ErrorCode::kNotFound,
                              "Invalid URL (" + method + " " + Utf8Snippet(request.path) + ")");
  } else if (rotate) {
    if (method == "POST") {
      answer.result = co_await run([&keys, &id] { return keys.Rotate(id); });
    } else {
      answer.allow = "POST";
    }
  } else if (get) {
    answer.result = keys.Get(id);
  } else if (method == "DELETE") {
    answer.result = co_await run([&keys, &id] { return keys.Revoke(id); });
  } else {
    answer.allow = "GET, HEAD, DELETE";
  }
  co_return answer;
}

}  // namespace kvgate::gateway

// The admin API's front door: the open /api/access, the admin token check, and the dispatch of
// each /api/ path to its area (read_api.cc, alerts_api.cc, keys_api.cc, engine_api.cc).
#include "gateway/admin/admin_api.h"

#include <openssl/crypto.h>

#include "common/json_text.h"
#include "gateway/answers.h"

namespace kvgate::gateway {
namespace {

using nlohmann::json;
namespace asio = boost::asio;

constexpr std::string_view kJson = "application/json";

}  // namespace

std::string_view OpenAdminApiWarning() {
  return "no server.admin_token: /api/* is open to anyone who can reach this port";
}

bool AdminApi::Authorized(const http::Request& request) const {
  if (deps_.admin_token.empty()) return true;
  std::string_view token = BearerToken(request.header("authorization"));
  if (token.empty()) token = request.header("x-admin-token");
  return token.size() == deps_.admin_token.size() &&
         CRYPTO_memcmp(token.data(), deps_.admin_token.data(), token.size()) == 0;
}

asio::awaitable<void> AdminApi::Handle(http::Request& request, http::ResponseWriter& writer) {
  // Open to all: whether the dashboard must ask for the admin token, and, when none is set, the
  // warning kvgate logs at startup. It says nothing an unauthenticated caller could not learn
  // from a 401.
  if (request.path == "/api/access") {
    if (!IsGet(request.method)) {
      co_await SendMethodNotAllowed(writer, request, "GET, HEAD");
      co_return;
    }
    const bool required = !deps_.admin_token.empty();
    std::string access = JsonText(
        json{{"token_required", required},
             {"warning", required ? json(nullptr) : json(std::string(OpenAdminApiWarning()))}});
    co_await writer.Send(200, kJson, std::move(access));
    co_return;
  }
  if (!Authorized(request)) {
    co_await writer.Send(401, kJson,
                         ErrorJson("the admin API needs Authorization: Bearer <admin_token>",
                                   "invalid_request_error", "invalid_admin_token"));
    co_return;
  }
  const std::string& path = request.path;
  if (path == "/api/keys" || path.rfind("/api/keys/", 0) == 0) {
    ApiAnswer answer = co_await HandleKeys(request);
    if (!answer.allow.empty()) {
      co_await SendMethodNotAllowed(writer, request, std::move(answer.allow));
    } else {
      co_await SendResult(writer, answer.result, answer.ok_status);
    }
    co_return;
  }
  if (path.rfind("/api/monitors", 0) == 0 || path.rfind("/api/alerts", 0) == 0 ||
      path.rfind("/api/channels", 0) == 0) {
    co_await HandleAlerts(request, writer);
    co_return;
  }
  const bool known = path == "/api/threads" || path.rfind("/api/threads/", 0) == 0 ||
                     path == "/api/requests" || path.rfind("/api/requests/", 0) == 0 ||
                     path == "/api/engine" || path == "/api/engine/lookup" ||
                     path == "/api/routes" || path == "/api/overview" || path == "/api/live";
  if (!known) {
    co_await SendNotFound(writer, request);
    co_return;
  }
  if (path == "/api/engine/lookup") {
    if (request.method != "POST") {
      co_await SendMethodNotAllowed(writer, request, "POST");
      co_return;
    }
    // Tokenizing and a hash walk: microseconds, fine on the event loop.
    Result<json> lookup = EngineLookup(request);
    if (!lookup) {
      co_await writer.Send(StatusFor(lookup.error().code), kJson,
                           ErrorJson(lookup.error().message, "invalid_request_error",
                                     std::string(ErrorCodeName(lookup.error().code))));
    } else {
      co_await writer.Send(200, kJson, JsonText(*lookup));
    }
    co_return;
  }
  if (!IsGet(request.method)) {
    co_await SendMethodNotAllowed(writer, request, "GET, HEAD");
    co_return;
  }
  co_await HandleRead(request, writer);
}

}  // namespace kvgate::gateway

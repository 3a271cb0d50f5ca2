#include "gateway/answers.h"

#include <cctype>
#include <utility>
#include <vector>

#include "common/ascii.h"
#include "common/json_text.h"
#include "gateway/providers/provider.h"

namespace kvgate::gateway {
namespace {

namespace asio = boost::asio;

constexpr std::string_view kJson = "application/json";

}  // namespace

std::string ErrorJson(std::string message, std::string type, std::string code) {
  return JsonText(
      providers::MakeOpenAIError(0, std::move(message), std::move(type), std::move(code)).body);
}

int StatusFor(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument:
      return 400;
    case ErrorCode::kNotFound:
      return 404;
    case ErrorCode::kUnauthenticated:
      return 401;
    case ErrorCode::kPermissionDenied:
      return 403;
    case ErrorCode::kResourceExhausted:
      return 429;
    case ErrorCode::kUnavailable:
      return 503;
    case ErrorCode::kDeadlineExceeded:
      return 504;
    default:
      return 500;
  }
}

std::string ErrorTypeFor(int status) {
  return status < 500 ? "invalid_request_error" : "server_error";
}

std::string_view BearerToken(std::string_view authorization) {
  if (authorization.size() <= 7 || !StartsWithIgnoreCase(authorization, "bearer ")) return {};
  return authorization.substr(7);
}

asio::awaitable<void> SendMethodNotAllowed(http::ResponseWriter& writer,
                                           const http::Request& request, std::string allow) {
  std::string message = "method " + request.method + " is not allowed on " + request.path +
                        " (allowed: " + allow + ")";
  // Built before the co_await: GCC 12 miscompiles braced temporaries inside one.
  std::vector<http::Header> headers{{"Allow", std::move(allow)}};
  std::string body = ErrorJson(std::move(message), "invalid_request_error", "method_not_allowed");
  co_await writer.Send(405, kJson, std::move(body), std::move(headers));
}

asio::awaitable<void> SendNotFound(http::ResponseWriter& writer, const http::Request& request) {
  co_await writer.Send(404, kJson,
                       ErrorJson("Invalid URL (" + request.method + " " + request.path + ")",
                                 "invalid_request_error", "not_found"));
}

asio::awaitable<void> SendResult(http::ResponseWriter& writer, const Result<nlohmann::json>& result,
                                 int ok_status) {
  if (!result) {
    const int status = StatusFor(result.error().code);
    co_await writer.Send(status, kJson,
                         ErrorJson(result.error().message, ErrorTypeFor(status),
                                   std::string(ErrorCodeName(result.error().code))));
    co_return;
  }
  co_await writer.Send(ok_status, kJson, JsonText(*result));
}

}  // namespace kvgate::gateway

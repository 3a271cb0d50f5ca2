// ServerOptions::on_expect_continue: a client that sends `Expect: 100-continue` waits for the
// server's go-ahead before uploading its body, so a request kvgate would refuse on its head alone
// is refused before the upload: no gateway key (or a wrong one) on /v1/*, no admin token on /api/*.
// The answer is the one the handler gives the same request (status, body, x-request-id); an
// inference request refused here is recorded, as every inference request is.
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/ids.h"
#include "common/json_text.h"
#include "gateway/gateway.h"
#include "gateway/providers/messages.h"
#include "gateway/request_log.h"

namespace kvgate::gateway {

std::optional<http::EarlyAnswer> Gateway::OnExpectContinue(const http::Request& request) {
  const std::string& path = request.path;
  providers::ClientError refusal;
  std::string message;
  if (path.rfind("/api/", 0) == 0 && path != "/api/access") {
    if (admin_->Authorized(request)) return std::nullopt;
    message = "the admin API needs Authorization: Bearer <admin_token>";
    refusal =
        providers::MakeOpenAIError(401, message, "invalid_request_error", "invalid_admin_token");
  } else if (path.rfind("/v1/", 0) == 0) {
    Result<std::shared_ptr<KeyState>> key = AuthenticateKey(request);
    if (key) return std::nullopt;
    message = key.error().message;
    refusal = providers::MakeOpenAIError(401, message, "invalid_request_error", "invalid_api_key");
    // The Messages API and its token counter answer in Anthropic's shape.
    if (path == "/v1/messages" || path == "/v1/messages/count_tokens") {
      refusal = providers::ToAnthropicError(refusal);
    }
  } else {
    return std::nullopt;
  }
  http::EarlyAnswer answer{.status = refusal.status,
                           .content_type = "application/json",
                           .body = JsonText(refusal.body),
                           .headers = {{"x-request-id", NewId("req")}}};
  const api::ClientApi* api = request.method == "POST" ? apis_.Find(path) : nullptr;
  std::string endpoint(api != nullptr ? providers::EndpointName(api->endpoint()) : "");
  if (!endpoint.empty()) {
    // Without a key: neither the key nor the X-Thread-Id header is recorded (an unauthenticated
    // client must not create or poison threads).
    RequestLog log(*deps_.recorder, *deps_.clock, request.arrival_monotonic_ns);
    telemetry::RequestRecord& rec = log.record();
    rec.request_id = answer.headers.front().value;
    rec.endpoint = std::move(endpoint);
    log.SetError(refusal.status, "error", std::move(message));
    log.Commit();
  }
  return answer;
}

}  // namespace kvgate::gateway

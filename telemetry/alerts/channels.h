// Sending alerts: the injected HTTP and SMTP senders, their libcurl implementations, and what each
// channel puts on the wire (Slack payload, Standard Webhooks signature, RFC 5322 mail).
//
// The senders are blocking and meant to be called from the alert thread only; the libcurl ones are
// nevertheless safe to call from several threads at once (one easy handle per call, no sharing).
// libcurl's global init must have happened before the first call (CurlGlobalInit(), from main or
// the test's main; curl_global_init is not thread safe, so it is not done lazily here).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/error.h"
#include "telemetry/alerts/rules.h"

namespace kvgate::telemetry::alerts {

using Headers = std::vector<std::pair<std::string, std::string>>;

struct HttpRequest {
  std::string url;
  Headers headers;
  std::string body;  // POSTed
  int64_t timeout_ms = 10'000;
};

struct HttpResponse {
  int status = 0;
  Headers headers;  // names lower-cased
  std::string body;
  std::optional<std::string> Header(std::string_view lower_name) const;
};

// A transport error (DNS, connect, TLS, timeout) is an Error (kUnavailable / kDeadlineExceeded);
// any HTTP answer, 4xx/5xx included, is a response.
class HttpSender {
 public:
  virtual ~HttpSender() = default;
  virtual Result<HttpResponse> Post(const HttpRequest& request) = 0;
};

struct MailMessage {
  std::string from;             // envelope sender (bare address)
  std::vector<std::string> to;  // envelope recipients (bare addresses)
  std::string data;             // the full RFC 5322 message, CRLF line ends
};

class SmtpSender {
 public:
  virtual ~SmtpSender() = default;
  // Submits `message` to the server of `channel` (url, credentials, ca_file).
  virtual Status Send(const ChannelConfig& channel, const MailMessage& message) = 0;
};

// libcurl's process-wide init; call once from main before any thread uses the senders.
Status CurlGlobalInit();

// POST with libcurl; follows no redirects; verifies TLS peers.
class CurlHttpSender final : public HttpSender {
 public:
  Result<HttpResponse> Post(const HttpRequest& request) override;
};

// SMTP with libcurl: smtp:// requires STARTTLS (CURLUSESSL_ALL), smtps:// is implicit TLS; AUTH
// only after encryption; peer verification on (ca_file adds a CA bundle for private relays).
class CurlSmtpSender final : public SmtpSender {
 public:
  explicit CurlSmtpSender(int64_t timeout_ms = 30'000) : timeout_ms_(timeout_ms) {}
  Status Send(const ChannelConfig& channel, const MailMessage& message) override;

 private:
  const int64_t timeout_ms_;
};

// --- What goes on the wire --------------------------------------------------------------------

// Slack incoming-webhook body: {"text": fallback line, "blocks": [header, section, context]}.
nlohmann::json SlackPayload(const AlertEvent& event);

// Standard Webhooks: base64(HMAC-SHA256(key, id + "." + timestamp + "." + body)) where key is the
// base64-decoded part of `secret` after "whsec_". Returns the header value "v1,<signature>".
Result<std::string> SignWebhook(std::string_view secret, std::string_view id,
                                int64_t timestamp_seconds, std::string_view body);
// Constant-time check of a received "webhook-signature" header (space-separated "v1,<sig>" list)
// with a tolerance on the timestamp against `now_seconds`. For receivers and tests.
bool VerifyWebhook(std::string_view secret, std::string_view id, std::string_view timestamp,
                   std::string_view body, std::string_view signature_header, int64_t now_seconds,
                   int64_t tolerance_seconds = 300);

// Headers From, To, Subject, Date (RFC 5322, UTC), Message-ID <message_id@kvgate>, MIME-Version,
// Content-Type text/plain UTF-8; body lines dot-safe for SMTP are left to libcurl.
MailMessage EmailMessage(const ChannelConfig& channel, const AlertEvent& event,
                         std::string_view message_id, int64_t now_unix_seconds);

// Retry-After: delay-seconds or an HTTP-date (relative to now). nullopt when absent or malformed.
std::optional<int64_t> ParseRetryAfterSeconds(std::string_view value, int64_t now_unix_seconds);

}  // namespace kvgate::telemetry::alerts

#include "telemetry/alerts/channels.h"

#include <curl/curl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <ctime>
#include <memory>

#include "common/ascii.h"

namespace kvgate::telemetry::alerts {
namespace {

struct CurlDeleter {
  void operator()(CURL* c) const { curl_easy_cleanup(c); }
};
struct SlistDeleter {
  void operator()(curl_slist* s) const { curl_slist_free_all(s); }
};
using CurlPtr = std::unique_ptr<CURL, CurlDeleter>;
using SlistPtr = std::unique_ptr<curl_slist, SlistDeleter>;

size_t AppendBody(char* data, size_t size, size_t n, void* user) {
  static_cast<std::string*>(user)->append(data, size * n);
  return size * n;
}

size_t AppendHeader(char* data, size_t size, size_t n, void* user) {
  std::string_view line(data, size * n);
  const size_t colon = line.find(':');
  if (colon != std::string_view::npos) {
    std::string name = AsciiLowered(line.substr(0, colon));
    std::string_view value = line.substr(colon + 1);
    while (!value.empty() && (value.front() == ' ' || value.front() == '\t'))
      value.remove_prefix(1);
    while (!value.empty() &&
           (value.back() == '\r' || value.back() == '\n' || value.back() == ' ')) {
      value.remove_suffix(1);
    }
    static_cast<Headers*>(user)->emplace_back(std::move(name), std::string(value));
  }
  return size * n;
}

struct ReadState {
  std::string_view data;
};

size_t ReadUpload(char* buffer, size_t size, size_t n, void* user) {
  auto* state = static_cast<ReadState*>(user);
  const size_t take = std::min(size * n, state->data.size());
  std::copy_n(state->data.data(), take, buffer);
  state->data.remove_prefix(take);
  return take;
}

Error CurlError(CURLcode code, const char* errbuf) {
  const ErrorCode kind =
      code == CURLE_OPERATION_TIMEDOUT ? ErrorCode::kDeadlineExceeded : ErrorCode::kUnavailable;
  std::string message = curl_easy_strerror(code);
  if (errbuf[0] != '\0') message += std::string(": ") + errbuf;
  return Error{kind, std::move(message)};
}

std::string Base64Encode(const unsigned char* data, size_t n) {
  std::string out(4 * ((n + 2) / 3), '\0');
  const int len = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()), data, int(n));
  out.resize(size_t(std::max(len, 0)));
  return out;
}

// Strict RFC 4648 base64: the alphabet only, '=' only as the last one or two characters
// (EVP_DecodeBlock alone skips blanks and accepts padding anywhere).
std::optional<std::string> Base64Decode(std::string_view in) {
  if (in.empty() || in.size() % 4 != 0) return std::nullopt;
  for (size_t i = 0; i < in.size(); ++i) {
    const char c = in[i];
    const bool alphabet = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
                          (c >= '0' && c <= '9') || c == '+' || c == '/';
    const bool padding = c == '=' && i + 2 >= in.size() && (i + 1 == in.size() || in.back() == '=');
    if (!alphabet && !padding) return std::nullopt;
  }
  std::string out(in.size() / 4 * 3, '\0');
  const int len =
      EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                      reinterpret_cast<const unsigned char*>(in.data()), int(in.size()));
  if (len < 0) return std::nullopt;
  size_t pad = 0;
  if (in.back() == '=') ++pad;
  if (in.size() >= 2 && in[in.size() - 2] == '=') ++pad;
  out.resize(size_t(len) - pad);
  return out;
}

std::string FormatValue(const AlertEvent& e) {
  char buf[64];
  if (e.metric == "error_rate" || e.metric == "cache_hit_rate") {
    std::snprintf(buf, sizeof(buf), "%.1f%%", e.value * 100);
  } else if (e.metric == "cost") {
    std::snprintf(buf, sizeof(buf), "$%.4f", e.value);
  } else if (e.metric == "cache_drop") {
    std::snprintf(buf, sizeof(buf), "%.0f", e.value);
  } else {
    std::snprintf(buf, sizeof(buf), "%.3f s", e.value);
  }
  return buf;
}

std::string Title(const AlertEvent& e) {
  if (e.kind == "resolved") return "Resolved: " + e.rule_name;
  if (e.kind == "test") return "Test alert: " + e.rule_name;
  return "Alert: " + e.rule_name;
}

}  // namespace

std::optional<std::string> HttpResponse::Header(std::string_view lower_name) const {
  for (const auto& [name, value] : headers) {
    if (name == lower_name) return value;
  }
  return std::nullopt;
}

Status CurlGlobalInit() {
  if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
    return MakeError(ErrorCode::kInternal, "curl_global_init failed");
  }
  return {};
}

Result<HttpResponse> CurlHttpSender::Post(const HttpRequest& request) {
  CurlPtr curl(curl_easy_init());
  if (!curl) return MakeError(ErrorCode::kInternal, "curl_easy_init failed");
  char errbuf[CURL_ERROR_SIZE] = {0};
  HttpResponse response;
  SlistPtr headers;
  Headers lines = request.headers;
  // No "Expect: 100-continue" round trip (libcurl adds it to larger POSTs): alert bodies are small
  // and a receiver that ignores Expect would cost a one-second stall per delivery.
  lines.emplace_back("Expect", "");
  for (const auto& [name, value] : lines) {
    const std::string line = value.empty() ? name + ":" : name + ": " + value;
    curl_slist* next = curl_slist_append(headers.get(), line.c_str());
    if (!next) return MakeError(ErrorCode::kInternal, "curl_slist_append failed");
    (void)headers.release();
    headers.reset(next);
  }
  CURL* c = curl.get();
  curl_easy_setopt(c, CURLOPT_URL, request.url.c_str());
  curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
  curl_easy_setopt(c, CURLOPT_POST, 1L);
  curl_easy_setopt(c, CURLOPT_POSTFIELDS, request.body.data());
  curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, curl_off_t(request.body.size()));
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers.get());
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, long(request.timeout_ms));
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, long(std::min<int64_t>(request.timeout_ms, 5000)));
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, AppendBody);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &response.body);
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, AppendHeader);
  curl_easy_setopt(c, CURLOPT_HEADERDATA, &response.headers);
  const CURLcode rc = curl_easy_perform(c);
  if (rc != CURLE_OK) return std::unexpected(CurlError(rc, errbuf));
  long status = 0;
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
  response.status = int(status);
  return response;
}

Status CurlSmtpSender::Send(const ChannelConfig& channel, const MailMessage& message) {
  CurlPtr curl(curl_easy_init());
  if (!curl) return MakeError(ErrorCode::kInternal, "curl_easy_init failed");
  char errbuf[CURL_ERROR_SIZE] = {0};
  SlistPtr rcpt;
  for (const std::string& to : message.to) {
    const std::string addr = "<" + to + ">";
    curl_slist* next = curl_slist_append(rcpt.get(), addr.c_str());
    if (!next) return MakeError(ErrorCode::kInternal, "curl_slist_append failed");
    (void)rcpt.release();
    rcpt.reset(next);
  }
  const std::string from = "<" + message.from + ">";
  ReadState upload{message.data};
  CURL* c = curl.get();
  curl_easy_setopt(c, CURLOPT_URL, channel.url.c_str());
  curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "smtp,smtps");
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
  // smtp:// must upgrade with STARTTLS or fail; credentials are never sent in the clear.
  curl_easy_setopt(c, CURLOPT_USE_SSL, long(CURLUSESSL_ALL));
  if (!channel.ca_file.empty()) curl_easy_setopt(c, CURLOPT_CAINFO, channel.ca_file.c_str());
  if (!channel.username.empty()) {
    curl_easy_setopt(c, CURLOPT_USERNAME, channel.username.c_str());
    curl_easy_setopt(c, CURLOPT_PASSWORD, channel.password.c_str());
  }
  curl_easy_setopt(c, CURLOPT_MAIL_FROM, from.c_str());
  curl_easy_setopt(c, CURLOPT_MAIL_RCPT, rcpt.get());
  curl_easy_setopt(c, CURLOPT_READFUNCTION, ReadUpload);
  curl_easy_setopt(c, CURLOPT_READDATA, &upload);
  curl_easy_setopt(c, CURLOPT_UPLOAD, 1L);
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, long(timeout_ms_));
  const CURLcode rc = curl_easy_perform(c);
  if (rc != CURLE_OK) return std::unexpected(CurlError(rc, errbuf));
  return {};
}

nlohmann::json SlackPayload(const AlertEvent& e) {
  const std::string title = Title(e);
  const std::string text = title + " — " + e.summary;
  std::string fields = "*Metric:* " + e.metric + " " + e.condition + " " +
                       (e.metric == "cache_drop" ? std::to_string(int64_t(e.threshold))
                                                 : nlohmann::json(e.threshold).dump()) +
                       "\n*Value:* " + FormatValue(e) + " over " + std::to_string(e.requests) +
                       " requests in " + std::to_string(e.window_seconds) + " s\n*Scope:* " +
                       e.scope + (e.scope_key.empty() ? "" : " `" + e.scope_key + "`");
  return {{"text", text},
          {"blocks",
           {{{"type", "header"}, {"text", {{"type", "plain_text"}, {"text", title}}}},
            {{"type", "section"}, {"text", {{"type", "mrkdwn"}, {"text", fields}}}},
            {{"type", "context"},
             {"elements", {{{"type", "mrkdwn"}, {"text", "kvgate alert `" + e.id + "`"}}}}}}}};
}

Result<std::string> SignWebhook(std::string_view secret, std::string_view id,
                                int64_t timestamp_seconds, std::string_view body) {
  if (!secret.starts_with("whsec_")) {
    return MakeError(ErrorCode::kInvalidArgument, "webhook secret must start with whsec_");
  }
  const std::optional<std::string> key = Base64Decode(secret.substr(6));
  if (!key || key->empty()) {
    return MakeError(ErrorCode::kInvalidArgument, "webhook secret is not valid base64");
  }
  std::string signed_content;
  signed_content.reserve(id.size() + body.size() + 24);
  signed_content.append(id).append(".").append(std::to_string(timestamp_seconds)).append(".");
  signed_content.append(body);
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int mac_len = 0;
  if (!HMAC(EVP_sha256(), key->data(), int(key->size()),
            reinterpret_cast<const unsigned char*>(signed_content.data()), signed_content.size(),
            mac, &mac_len)) {
    return MakeError(ErrorCode::kInternal, "HMAC-SHA256 failed");
  }
  return "v1," + Base64Encode(mac, mac_len);
}

bool VerifyWebhook(std::string_view secret, std::string_view id, std::string_view timestamp,
                   std::string_view body, std::string_view signature_header, int64_t now_seconds,
                   int64_t tolerance_seconds) {
  if (timestamp.empty() || timestamp.size() > 12 ||
      timestamp.find_first_not_of("0123456789") != std::string_view::npos) {
    return false;
  }
  const int64_t ts = std::stoll(std::string(timestamp));
  if (ts < now_seconds - tolerance_seconds || ts > now_seconds + tolerance_seconds) return false;
  auto expected = SignWebhook(secret, id, ts, body);
  if (!expected) return false;
  bool ok = false;
  size_t start = 0;
  while (start <= signature_header.size()) {
    size_t end = signature_header.find(' ', start);
    if (end == std::string_view::npos) end = signature_header.size();
    const std::string_view candidate = signature_header.substr(start, end - start);
    if (candidate.size() == expected->size() &&
        CRYPTO_memcmp(candidate.data(), expected->data(), candidate.size()) == 0) {
      ok = true;  // keep scanning: the time taken does not depend on which entry matched
    }
    start = end + 1;
  }
  return ok;
}

MailMessage EmailMessage(const ChannelConfig& channel, const AlertEvent& e,
                         std::string_view message_id, int64_t now_unix_seconds) {
  char date[64];
  const std::time_t t = std::time_t(now_unix_seconds);
  std::tm tm{};
  gmtime_r(&t, &tm);
  std::strftime(date, sizeof(date), "%a, %d %b %Y %H:%M:%S +0000", &tm);
  std::string to_header;
  for (const std::string& to : channel.to) to_header += (to_header.empty() ? "" : ", ") + to;
  // Header values come from config and monitor names: strip CR/LF so nothing can inject headers.
  auto one_line = [](std::string s) {
    std::replace(s.begin(), s.end(), '\r', ' ');
    std::replace(s.begin(), s.end(), '\n', ' ');
    return s;
  };
  std::string data;
  data += "From: " + one_line(channel.from) + "\r\n";
  data += "To: " + one_line(to_header) + "\r\n";
  data += "Subject: [kvgate] " + one_line(Title(e)) + "\r\n";
  data += std::string("Date: ") + date + "\r\n";
  data += "Message-ID: <" + std::string(message_id) + "@kvgate>\r\n";
  data += "MIME-Version: 1.0\r\n";
  data += "Content-Type: text/plain; charset=utf-8\r\n";
  data += "Content-Transfer-Encoding: 8bit\r\n";
  data += "\r\n";
  std::string body = e.summary + "\n\nMetric: " + e.metric + " " + e.condition + " " +
                     nlohmann::json(e.threshold).dump() + "\nValue: " + FormatValue(e) + " over " +
                     std::to_string(e.requests) + " requests in " +
                     std::to_string(e.window_seconds) + " s\nScope: " + e.scope + " " +
                     e.scope_key + "\nAlert id: " + e.id + "\nIncident: " + e.incident_id + "\n";
  for (char ch : body) {
    if (ch == '\n') {
      data += "\r\n";
    } else if (ch != '\r') {
      data += ch;
    }
  }
  return MailMessage{channel.from, channel.to, std::move(data)};
}

std::optional<int64_t> ParseRetryAfterSeconds(std::string_view value, int64_t now_unix_seconds) {
  while (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  while (!value.empty() && value.back() == ' ') value.remove_suffix(1);
  if (value.empty()) return std::nullopt;
  if (value.find_first_not_of("0123456789") == std::string_view::npos) {
    if (value.size() > 9) return std::nullopt;
    return std::stoll(std::string(value));
  }
  std::tm tm{};
  const std::string s(value);
  const char* end = strptime(s.c_str(), "%a, %d %b %Y %H:%M:%S GMT", &tm);
  if (end == nullptr || *end != '\0') return std::nullopt;
  const int64_t at = int64_t(timegm(&tm));
  return std::max<int64_t>(0, at - now_unix_seconds);
}

}  // namespace kvgate::telemetry::alerts

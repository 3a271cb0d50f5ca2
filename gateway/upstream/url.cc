// Url parsing and Response header lookup: plain string work, no sockets.
#include <charconv>
#include <string>
#include <string_view>

#include "common/ascii.h"
#include "common/redact.h"
#include "gateway/upstream/client.h"

namespace kvgate::upstream {
namespace {


bool ValidHostChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '.' || c == '_';
}

}  // namespace

Result<Url> Url::Parse(std::string_view text) {
  auto bad = [&](std::string_view why) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "bad upstream URL '" + RedactUrlCredentials(text) + "': " + std::string(why));
  };
  Url url;
  const size_t scheme_end = text.find("://");
  if (scheme_end == std::string_view::npos) return bad("missing scheme (http:// or https://)");
  const std::string_view scheme = text.substr(0, scheme_end);
  if (EqualsIgnoreCase(scheme, "http")) {
    url.scheme = "http";
    url.port = 80;
  } else if (EqualsIgnoreCase(scheme, "https")) {
    url.scheme = "https";
    url.port = 443;
  } else {
    return bad("scheme must be http or https");
  }
  std::string_view rest = text.substr(scheme_end + 3);
  const size_t authority_end = rest.find_first_of("/?#");
  std::string_view authority = rest.substr(0, authority_end);
  std::string_view path =
      authority_end == std::string_view::npos ? std::string_view{} : rest.substr(authority_end);
  if (authority.find('@') != std::string_view::npos) {
    return bad("credentials in the URL are not supported; use headers");
  }
  if (!path.empty() && path.front() != '/') return bad("query or fragment not allowed");
  if (path.find_first_of("?#") != std::string_view::npos) {
    return bad("query or fragment not allowed");
  }

  std::string_view port_text;
  if (!authority.empty() && authority.front() == '[') {  // IPv6 literal
    const size_t close = authority.find(']');
    if (close == std::string_view::npos) return bad("unterminated IPv6 literal");
    url.host = std::string(authority.substr(1, close - 1));
    if (url.host.empty() ||
        url.host.find_first_not_of("0123456789abcdefABCDEF:.") != std::string::npos) {
      return bad("invalid IPv6 literal");
    }
    const std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') return bad("unexpected characters after IPv6 literal");
      port_text = after.substr(1);
      if (port_text.empty()) return bad("empty port");
    }
  } else {
    const size_t colon = authority.rfind(':');
    if (colon != std::string_view::npos) {
      port_text = authority.substr(colon + 1);
      if (port_text.empty()) return bad("empty port");
      authority = authority.substr(0, colon);
    }
    if (authority.empty()) return bad("missing host");
    for (const char c : authority) {
      if (!ValidHostChar(c)) return bad("invalid character in host");
    }
    url.host.reserve(authority.size());
    for (const char c : authority) url.host.push_back(AsciiLower(c));
  }
  if (!port_text.empty()) {
    unsigned value = 0;
    const auto [ptr, ec] =
        std::from_chars(port_text.data(), port_text.data() + port_text.size(), value);
    if (ec != std::errc{} || ptr != port_text.data() + port_text.size() || value == 0 ||
        value > 65535) {
      return bad("port must be 1..65535");
    }
    url.port = static_cast<uint16_t>(value);
  }
  while (!path.empty() && path.back() == '/') path.remove_suffix(1);
  url.base_path = std::string(path);
  return url;
}

std::string Url::Origin() const {
  const bool v6 = host.find(':') != std::string::npos;
  return scheme + "://" + (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

std::string_view Response::header(std::string_view name) const {
  for (const http::Header& h : headers) {
    if (EqualsIgnoreCase(h.name, name)) return h.value;
  }
  return {};
}

}  // namespace kvgate::upstream

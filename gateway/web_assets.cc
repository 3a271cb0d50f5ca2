#include "gateway/web_assets.h"

#include <algorithm>

#include "common/json_text.h"
#include "gateway/providers/provider.h"
#include "web/embedded.h"

namespace kvgate::gateway {
namespace {

constexpr std::string_view kAssetsPrefix = "/assets/";

std::string_view ContentTypeOf(std::string_view name) {
  auto ends_with = [&](std::string_view suffix) { return name.ends_with(suffix); };
  if (ends_with(".html")) return "text/html; charset=utf-8";
  if (ends_with(".css")) return "text/css; charset=utf-8";
  if (ends_with(".js")) return "text/javascript; charset=utf-8";
  if (ends_with(".png")) return "image/png";
  if (ends_with(".svg")) return "image/svg+xml";
  return "application/octet-stream";
}

const web::EmbeddedFile* FindFile(std::string_view name) {
  const auto files = web::EmbeddedFiles();
  auto it = std::lower_bound(files.begin(), files.end(), name,
                             [](const web::EmbeddedFile& f, std::string_view n) { return f.name < n; });
  return it != files.end() && it->name == name ? &*it : nullptr;
}

// RFC 9110 13.1.2: "*", or a list of entity tags, any of which may be weak (W/"...": a weak
// comparison is what If-None-Match uses).
bool MatchesIfNoneMatch(std::string_view header, std::string_view etag) {
  if (header.empty()) return false;
  size_t pos = 0;
  while (pos < header.size()) {
    while (pos < header.size() && (header[pos] == ' ' || header[pos] == '\t' || header[pos] == ','))
      ++pos;
    if (pos >= header.size()) break;
    if (header[pos] == '*') return true;
    if (header.substr(pos, 2) == "W/") pos += 2;
    const size_t end = header.find(',', pos);
    std::string_view tag = header.substr(pos, end == std::string_view::npos ? header.npos : end - pos);
    while (!tag.empty() && (tag.back() == ' ' || tag.back() == '\t')) tag.remove_suffix(1);
    if (tag == etag) return true;
    if (end == std::string_view::npos) break;
    pos = end + 1;
  }
  return false;
}

std::string NotFoundJson(const http::Request& request) {
  return JsonText(providers::MakeOpenAIError(404, "Invalid URL (" + request.method + " " +
                                                      request.path + ")",
                                             "invalid_request_error", "not_found")
                      .body);
}

}  // namespace

bool IsWebPath(std::string_view path) {
  return path == "/" || path == "/index.html" || path.starts_with(kAssetsPrefix);
}

WebReply ServeWebAsset(const http::Request& request) {
  WebReply reply;
  if (request.method != "GET" && request.method != "HEAD") {
    reply.status = 405;
    reply.content_type = "application/json";
    reply.body = JsonText(providers::MakeOpenAIError(
                              405, "method " + request.method + " is not allowed on " +
                                       request.path + " (allowed: GET, HEAD)",
                              "invalid_request_error", "method_not_allowed")
                              .body);
    reply.headers.push_back({"Allow", "GET, HEAD"});
    return reply;
  }
  const std::string_view path = request.path;
  const std::string_view name =
      path.starts_with(kAssetsPrefix) ? path.substr(kAssetsPrefix.size()) : "index.html";
  const web::EmbeddedFile* file = FindFile(name);
  // index.html is the page itself, not an asset: only "/" (and "/index.html") serve it.
  if (file == nullptr || (name == "index.html" && path.starts_with(kAssetsPrefix))) {
    reply.status = 404;
    reply.content_type = "application/json";
    reply.body = NotFoundJson(request);
    return reply;
  }
  reply.headers = {{"ETag", std::string(file->etag)},
                   {"Cache-Control", "no-cache"},
                   {"Content-Security-Policy", std::string(kDashboardCsp)},
                   {"X-Content-Type-Options", "nosniff"},
                   {"Referrer-Policy", "no-referrer"},
                   {"X-Frame-Options", "DENY"}};
  reply.content_type = std::string(ContentTypeOf(file->name));
  if (MatchesIfNoneMatch(request.header("if-none-match"), file->etag)) {
    reply.status = 304;
    return reply;
  }
  reply.body = std::string(file->data);
  return reply;
}

boost::asio::awaitable<void> SendWebAsset(const http::Request& request,
                                          http::ResponseWriter& writer) {
  WebReply reply = ServeWebAsset(request);
  co_await writer.Send(reply.status, reply.content_type, std::move(reply.body),
                       std::move(reply.headers));
}

}  // namespace kvgate::gateway

// OpenAI-style error bodies, and upstream error responses translated into them.
#include <exception>
#include <string>
#include <utility>

#include "gateway/providers/internal.h"

namespace kvgate::providers {

using nlohmann::json;

namespace {

// See the status table in provider.h.
int ClientStatusFor(int upstream_status) {
  switch (upstream_status) {
    case 401:
    case 403:
      return 502;
    case 408:
      return 504;
    case 502:
    case 503:
    case 504:
      return upstream_status;
    case 529:
      return 503;
    default:
      break;
  }
  if (upstream_status >= 400 && upstream_status < 500) return upstream_status;
  return 502;
}

std::string DefaultTypeFor(int upstream_status) {
  switch (upstream_status) {
    case 400:
    case 409:
    case 413:
    case 422:
      return "invalid_request_error";
    case 401:
      return "authentication_error";
    case 403:
      return "permission_error";
    case 404:
      return "not_found_error";
    case 429:
      return "rate_limit_error";
    default:
      break;
  }
  return upstream_status >= 400 && upstream_status < 500 ? "invalid_request_error" : "server_error";
}

// A string, or a number in decimal; "" otherwise.
std::string ScalarText(const json* v) {
  if (v == nullptr) return "";
  if (v->is_string()) return v->get<std::string>();
  if (v->is_number_integer() || v->is_number_unsigned()) return v->dump();
  return "";
}

struct Parsed {
  std::string message;
  std::string type;
  std::string code;
  std::string param;
};

Parsed ParseErrorBody(const json& body) {
  using internal::Member;
  using internal::StringMember;
  Parsed p;
  if (!body.is_object()) return p;
  const json* error = Member(body, "error");
  if (StringMember(body, "type") == "error" && error != nullptr && error->is_object()) {
    // Anthropic: {"type":"error","error":{"type":"...","message":"..."}}
    p.message = StringMember(*error, "message");
    p.code = StringMember(*error, "type");
    p.type = internal::AnthropicErrorTypeToOpenAI(p.code);
  } else if (error != nullptr && error->is_object()) {
    // OpenAI and most compatible servers: {"error":{"message","type","param","code"}}
    p.message = StringMember(*error, "message");
    p.type = StringMember(*error, "type");
    p.code = ScalarText(Member(*error, "code"));
    p.param = StringMember(*error, "param");
  } else if (error != nullptr && error->is_string()) {
    p.message = error->get<std::string>();
  } else if (const json* detail = Member(body, "detail"); detail != nullptr) {
    // FastAPI-style servers: {"detail": "..."} or a list of validation errors.
    p.message = detail->is_string() ? detail->get<std::string>() : internal::Dump(*detail);
  } else {
    // vLLM's older shape: {"object":"error","message","type","param","code"}
    p.message = StringMember(body, "message");
    p.type = StringMember(body, "type");
    p.code = ScalarText(Member(body, "code"));
    p.param = StringMember(body, "param");
  }
  return p;
}

}  // namespace

namespace internal {

std::string AnthropicErrorTypeToOpenAI(std::string_view anthropic_type) {
  if (anthropic_type == "invalid_request_error" || anthropic_type == "request_too_large") {
    return "invalid_request_error";
  }
  if (anthropic_type == "authentication_error" || anthropic_type == "permission_error" ||
      anthropic_type == "not_found_error" || anthropic_type == "rate_limit_error") {
    return std::string(anthropic_type);
  }
  if (anthropic_type == "api_error" || anthropic_type == "overloaded_error" ||
      anthropic_type == "timeout_error") {
    return "server_error";
  }
  return "upstream_error";
}

}  // namespace internal

std::string ClientError::message() const {
  if (auto it = body.find("error"); it != body.end() && it->is_object()) {
    if (auto m = it->find("message"); m != it->end() && m->is_string()) return m->get<std::string>();
  }
  return "";
}

ClientError MakeOpenAIError(int status, std::string message, std::string type, std::string code,
                            std::string param) {
  ClientError out;
  out.status = status;
  try {
    json error = json::object();
    error["message"] = std::move(message);
    error["type"] = std::move(type);
    error["param"] = param.empty() ? json(nullptr) : json(std::move(param));
    error["code"] = code.empty() ? json(nullptr) : json(std::move(code));
    out.body = json{{"error", std::move(error)}};
  } catch (const std::exception&) {
    out.body = nullptr;  // allocation failure: the caller still has the status
  }
  return out;
}

ClientError TranslateUpstreamError(ProviderType type, int upstream_status,
                                   std::string_view upstream_body) {
  (void)type;  // every shape is recognized from the body itself
  try {
    const json body = internal::ParseJson(upstream_body);
    Parsed p = body.is_discarded() ? Parsed{} : ParseErrorBody(body);
    if (p.message.empty()) {
      p.message = "upstream returned HTTP " + std::to_string(upstream_status);
      if (!upstream_body.empty()) p.message += ": " + internal::Snippet(upstream_body);
    }
    if (upstream_status == 401 || upstream_status == 403) {
      p.message = "the upstream provider rejected the gateway's credentials: " + p.message;
    }
    if (p.type.empty()) p.type = DefaultTypeFor(upstream_status);
    return MakeOpenAIError(ClientStatusFor(upstream_status), std::move(p.message),
                           std::move(p.type), std::move(p.code), std::move(p.param));
  } catch (const std::exception&) {
    return MakeOpenAIError(502, "upstream returned HTTP " + std::to_string(upstream_status),
                           "server_error");
  }
}

}  // namespace kvgate::providers

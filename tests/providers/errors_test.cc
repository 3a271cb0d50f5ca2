// OpenAI-style error bodies and the translation of upstream error responses.
#include <gtest/gtest.h>

#include <string>

#include "gateway/providers/provider.h"

namespace kvgate::providers {
namespace {

using nlohmann::json;

TEST(MakeOpenAIErrorTest, ShapeWithNullParamAndCode) {
  ClientError e = MakeOpenAIError(400, "bad", "invalid_request_error");
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(
      e.body,
      json::parse(
          R"({"error":{"message":"bad","type":"invalid_request_error","param":null,"code":null}})"));
  ClientError f =
      MakeOpenAIError(404, "no model", "invalid_request_error", "model_not_found", "model");
  EXPECT_EQ(f.body["error"]["code"], "model_not_found");
  EXPECT_EQ(f.body["error"]["param"], "model");
}

struct Case {
  ProviderType type;
  int upstream_status;
  std::string body;
  int status;
  std::string message;
  std::string type_name;
  json code;
  json param;
};

TEST(TranslateUpstreamErrorTest, ShapesAndStatusMapping) {
  const Case cases[] = {
      // Anthropic: type mapped, Anthropic type kept as code, message kept.
      {ProviderType::kAnthropic, 429,
       R"({"type":"error","error":{"type":"rate_limit_error","message":"Number of request tokens has exceeded your per-minute rate limit"}})",
       429, "Number of request tokens has exceeded your per-minute rate limit", "rate_limit_error",
       "rate_limit_error", nullptr},
      {ProviderType::kAnthropic, 529,
       R"({"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}})", 503,
       "Overloaded", "server_error", "overloaded_error", nullptr},
      {ProviderType::kAnthropic, 400,
       R"({"type":"error","error":{"type":"invalid_request_error","message":"messages: roles must alternate"}})",
       400, "messages: roles must alternate", "invalid_request_error", "invalid_request_error",
       nullptr},
      {ProviderType::kAnthropic, 413,
       R"({"type":"error","error":{"type":"request_too_large","message":"Request exceeds the maximum allowed number of bytes."}})",
       413, "Request exceeds the maximum allowed number of bytes.", "invalid_request_error",
       "request_too_large", nullptr},
      {ProviderType::kAnthropic, 500,
       R"({"type":"error","error":{"type":"api_error","message":"Internal server error"}})", 502,
       "Internal server error", "server_error", "api_error", nullptr},
      // OpenAI: everything kept.
      {ProviderType::kOpenAI, 400,
       R"({"error":{"message":"Invalid value for 'temperature'.","type":"invalid_request_error","param":"temperature","code":"invalid_value"}})",
       400, "Invalid value for 'temperature'.", "invalid_request_error", "invalid_value",
       "temperature"},
      // The gateway's credentials, not the client's: 502, message says so and keeps the provider's.
      {ProviderType::kOpenAI, 401,
       R"({"error":{"message":"Incorrect API key provided: sk-abc.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}})",
       502,
       "the upstream provider rejected the gateway's credentials: Incorrect API key provided: "
       "sk-abc.",
       "invalid_request_error", "invalid_api_key", nullptr},
      // vLLM's older top-level shape with a numeric code.
      {ProviderType::kVllm, 400,
       R"({"object":"error","message":"This model's maximum context length is 4096 tokens.","type":"BadRequestError","param":null,"code":400})",
       400, "This model's maximum context length is 4096 tokens.", "BadRequestError", "400",
       nullptr},
      // FastAPI detail.
      {ProviderType::kSglang, 404, R"({"detail":"Not Found"})", 404, "Not Found", "not_found_error",
       nullptr, nullptr},
      // A bare string error.
      {ProviderType::kLlamaCpp, 503, R"({"error":"Loading model"})", 503, "Loading model",
       "server_error", nullptr, nullptr},
      // Not JSON at all.
      {ProviderType::kOpenRouter, 500, "<html>Bad gateway</html>", 502,
       "upstream returned HTTP 500: <html>Bad gateway</html>", "server_error", nullptr, nullptr},
      {ProviderType::kDeepSeek, 408, "", 504, "upstream returned HTTP 408", "invalid_request_error",
       nullptr, nullptr},
      {ProviderType::kOpenAI, 302, "", 502, "upstream returned HTTP 302", "server_error", nullptr,
       nullptr},
      {ProviderType::kGeminiOpenAI, 429,
       R"([{"error":{"code":429,"message":"Resource exhausted","status":"RESOURCE_EXHAUSTED"}}])",
       429,
       "upstream returned HTTP 429: [{\"error\":{\"code\":429,\"message\":\"Resource "
       "exhausted\",\"status\":\"RESOURCE_EXHAUSTED\"}}]",
       "rate_limit_error", nullptr, nullptr},
  };
  for (const Case& c : cases) {
    ClientError e = TranslateUpstreamError(c.type, c.upstream_status, c.body);
    SCOPED_TRACE(c.body);
    EXPECT_EQ(e.status, c.status);
    EXPECT_EQ(e.body["error"]["message"], c.message);
    EXPECT_EQ(e.body["error"]["type"], c.type_name);
    EXPECT_EQ(e.body["error"]["code"], c.code);
    EXPECT_EQ(e.body["error"]["param"], c.param);
  }
}

TEST(TranslateUpstreamErrorTest, LongBodiesAreTruncatedInTheMessage) {
  const std::string body(5000, 'x');
  ClientError e = TranslateUpstreamError(ProviderType::kOpenAI, 500, body);
  const std::string message = e.body["error"]["message"];
  EXPECT_LT(message.size(), 300u);
  EXPECT_TRUE(message.ends_with("..."));
}

TEST(TranslateUpstreamErrorTest, InvalidUtf8NeverThrows) {
  ClientError e = TranslateUpstreamError(ProviderType::kOpenAI, 500, "\xff\xfe\xfd");
  EXPECT_EQ(e.status, 502);
  // Serializing the body for the client with a plain dump() must not throw either.
  std::string dumped;
  EXPECT_NO_THROW(dumped = e.body.dump());
  EXPECT_NE(dumped.find("\xef\xbf\xbd"), std::string::npos) << dumped;  // U+FFFD
  // A snippet cut in the middle of a multi-byte character is made valid too.
  ClientError cut =
      TranslateUpstreamError(ProviderType::kOpenAI, 500, std::string(199, 'a') + "\xc3\xa9tail");
  EXPECT_NO_THROW(cut.body.dump());
}

}  // namespace
}  // namespace kvgate::providers

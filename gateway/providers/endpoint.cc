#include "gateway/providers/endpoint.h"

#include <array>

namespace kvgate::providers {
namespace {

// In Endpoint's order.
constexpr std::array<EndpointTraits, kEndpointCount> kEndpoints = {{
    {.name = "chat.completions",
     .path = "/v1/chat/completions",
     .chat_messages = true,
     .openai_sampling = true,
     .prompt_cache_key = true},
    {.name = "completions", .path = "/v1/completions", .openai_sampling = true},
    {.name = "responses",
     .path = "/v1/responses",
     .client_stream_flags = true,
     .prompt_cache_key = true,
     .openai_only = true},
    {.name = "embeddings", .path = "/v1/embeddings", .streams = false, .openai_only = true},
    {.name = "messages", .path = "/v1/messages", .anthropic_only = true},
}};

}  // namespace

const EndpointTraits& EndpointTraitsOf(Endpoint endpoint) {
  return kEndpoints[static_cast<size_t>(endpoint)];
}

std::string_view EndpointName(Endpoint endpoint) { return EndpointTraitsOf(endpoint).name; }
std::string_view EndpointPath(Endpoint endpoint) { return EndpointTraitsOf(endpoint).path; }

}  // namespace kvgate::providers

// One request as telemetry records it: what happened, never what should have happened.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "common/error.h"
#include "telemetry/pricing.h"
#include "telemetry/trace_context.h"
#include "telemetry/usage.h"

namespace kvgate::telemetry {

struct PromptFingerprint;  // diagnosis.h

// Where a request's thread id came from (RequestRecord::thread_source; docs/api.md): the body's
// thread fields, a header (X-Thread-Id or an agent's session header), a Responses API
// previous_response_id chain, or kvgate's inference from the prompt (gateway/auto_threads.h).
inline constexpr std::string_view kThreadFromBody = "body";
inline constexpr std::string_view kThreadFromHeader = "header";
inline constexpr std::string_view kThreadFromResponseChain = "response_chain";
inline constexpr std::string_view kThreadFromAuto = "auto";

// RequestRecord::purpose of a keep-warm ping (the other purpose is "client").
inline constexpr std::string_view kPurposeKeepWarm = "keep_warm";

struct RequestRecord {
  std::string request_id;      // kvgate's id, also sent to the client as x-request-id
  // The W3C trace id (32 hex) the metrics' exemplars name: the exported trace's (`trace`) when
  // OpenTelemetry export is on, else the client's traceparent's; "" without either. Not stored.
  std::string trace_id;
  std::string thread_id;       // empty when the request has no thread
  std::string thread_source;   // kThreadFrom*: where thread_id came from; "" without one
  // An automatic thread that forked off another (a second request continued the same turn): the
  // thread it forked from. "" otherwise.
  std::string thread_parent;
  // Why kvgate made the request: "client" (a client's request) or "keep_warm" (a ping kvgate sent
  // on its own to renew thread_id's cached prefix, gateway/keep_warm.h: not a turn of the thread,
  // never diagnosed, but its cost is the thread's).
  std::string purpose = "client";
  int64_t created_at_us = 0;   // wall clock, microseconds since the epoch, when the request arrived
  std::string endpoint;        // "chat.completions" | "completions" | "responses" | "embeddings" |
                               // "messages"
  std::string model;           // the model name the client asked for
  std::string provider;        // the configured provider name the request went to ("" if none)
  std::string provider_type;   // ProviderTypeName of the target's type
  std::string upstream_model;  // the model name sent upstream
  // The configured model (models[].name) that served the request: the model the client named, or
  // the one its router chose. "" when none was reached.
  std::string target;
  int key_index = 0;           // which of the provider's API keys was used
  // The serving backend's identity as it reported it (OpenAI's system_fingerprint; the built-in
  // engine's instance id, which changes when it restarts and loses its cache). "" when none.
  std::string system_fingerprint;
  std::string api_key_id;      // the gateway key's id (not the key), "" when keys are off
  bool stream = false;
  // "ok" | "error" | "client_disconnected" | "upstream_error" | "timeout"
  std::string status;
  int http_status = 0;         // what kvgate answered the client (or would have, on disconnect)
  int upstream_status = 0;     // what the upstream answered, 0 when never reached
  std::optional<int64_t> latency_us;  // arrival -> last byte sent
  std::optional<int64_t> ttft_us;     // arrival -> first content token sent (streams)
  Usage usage;
  Cost cost;                   // computed from usage and the model's price at record time
  // On a client turn whose thread's cache a keep-warm ping renewed (so that it read what would
  // otherwise have expired and been written again): those reads at the write rate minus the read
  // rate, pico-USD. 0 otherwise.
  int64_t keep_warm_saved = 0;
  std::string error;           // message of the error the client saw, "" when none
  std::string upstream_request_id;  // the provider's request id header, when given
  // The id the client got in the response body ("chatcmpl-...", "msg_..."), "" when it got none:
  // what an SDK shows as `r.id`, so GET /api/requests/{id} finds the request by it too.
  std::string response_id;
  std::string finish_reason;
  // The prompt's fingerprint at message boundaries (diagnosis.h), on the turns the thread tracker
  // compares (successful turns of a thread); null on the others. The store keeps each thread's
  // latest one, so that a restarted gateway still diagnoses the thread's next turn against it.
  std::shared_ptr<const PromptFingerprint> prompt_fingerprint;
  // Filled by the thread tracker: null JSON when reads were as expected.
  nlohmann::json cache_diagnosis;
  // The router's decision for a model that is a router, as JSON text (router::Router::
  // DecisionText), "" otherwise. It is written once, on the request path, and stored as it is:
  // building it as a json tree cost more than the routing itself. The gateway reads back only
  // the parts below, which are not stored on their own.
  std::string route;
  // The cache helper that changed the request sent upstream ("prompt_cache_key",
  // "anthropic_auto_cache"; providers::CacheHelpers), "" when none acted.
  std::string cache_helper;
  // What the provider reported of its own cache miss (Anthropic's cache diagnostics,
  // providers::Translated::provider_cache_miss_reason): its reason, "none" for no miss, "" when
  // it reported nothing. kvgate's own cache_diagnosis stays the primary explanation.
  std::string provider_cache_miss_reason;
  struct RouteFacts {
    std::string router;
    std::string reason;
    bool moved = false;  // the decision moved the thread off its bound target
    std::optional<int64_t> estimated_cost_pico;  // its estimate for the target that answered
    std::string turn;  // that target's turn kind: "warm" | "after_expiry" | "first_use" | ""
  } route_facts;
  // Not stored: the request path already brought the thread tracker up to date from the store
  // (gateway::Recorder::SyncThread, with threads shared between replicas), so the diagnosis
  // need not read it again.
  bool thread_synced = false;
  // Every upstream attempt made for the request, in order (empty when none was made):
  // [{"target","provider","status","http_status","error","latency_ms"}].
  nlohmann::json attempts = nlohmann::json::array();
  // Not stored: the request's W3C trace and its attempts' spans, when OpenTelemetry export is on
  // (telemetry.otlp); inactive otherwise. The OTLP exporter builds the request's spans from it.
  RequestTrace trace;
};

// Makes every text field of `record` valid UTF-8 (invalid bytes become U+FFFD). Ids, model names
// and error messages can carry bytes from outside (headers, upstream bodies); a stored field
// that is not UTF-8 would make every query that serializes its row fail. Cheap when the text is
// already valid: one pass over each field, no allocation.
void MakeTextValid(RequestRecord& record);

// One record as a crash journal entry (binary), and back: every field but the prompt fingerprint
// (a replayed turn is not compared with its thread's next one), route_facts and thread_synced
// (not stored).
// Decoding makes the text valid UTF-8 (MakeTextValid), as recording does.
std::string EncodeJournalEntry(const RequestRecord& record);
// kCorruptData when the bytes are not an entry.
Result<RequestRecord> DecodeJournalEntry(std::string_view entry);
// A record from one line of the JSON format kvgate's journal had before its entries were binary
// (a journal an older kvgate left). kCorruptData when the line is not a journal entry.
Result<RequestRecord> FromJournalLine(std::string_view line);

}  // namespace kvgate::telemetry

#include "gateway/request_log.h"

namespace kvgate::gateway {

RequestLog::RequestLog(Recorder& recorder, const Clock& clock, int64_t arrival_monotonic_ns)
    : recorder_(recorder), clock_(clock), arrival_ns_(arrival_monotonic_ns) {
  // The wall-clock arrival time, back-dated by however long parsing took.
  record_.created_at_us = clock_.NowUnixMicros() - ElapsedMicros();
}

RequestLog::~RequestLog() {
  if (!committed_) {
    if (record_.status.empty() || record_.status == "ok") {
      record_.status = "client_disconnected";
      if (record_.http_status == 0) record_.http_status = 499;
      if (record_.error.empty()) record_.error = "the request ended before a response was complete";
    }
    Commit();
  }
}

int64_t RequestLog::ElapsedMicros() const {
  return (clock_.MonotonicNanos() - arrival_ns_) / 1000;
}

void RequestLog::MarkFirstToken() {
  if (!record_.ttft_us) record_.ttft_us = ElapsedMicros();
}

void RequestLog::SetError(int http_status, std::string status, std::string message) {
  record_.http_status = http_status;
  record_.status = std::move(status);
  record_.error = std::move(message);
}

void RequestLog::BeginAttempt(nlohmann::json entry) {
  if (committed_) return;
  if (record_.trace.active) {
    telemetry::AttemptSpan& span = record_.trace.attempts.emplace_back();
    span.span_id = telemetry::NewSpanId();
    span.start_us = ElapsedMicros();
    span.target = entry.value("target", "");
    span.provider = entry.value("provider", "");
  }
  record_.attempts.push_back(std::move(entry));
  attempt_started_ns_ = clock_.MonotonicNanos();
}

void RequestLog::EndAttemptSpan(const nlohmann::json& entry) {
  if (!record_.trace.active || record_.trace.attempts.empty()) return;
  telemetry::AttemptSpan& span = record_.trace.attempts.back();
  if (span.end_us >= 0) return;
  span.end_us = ElapsedMicros();
  span.status = entry.value("status", "");
  if (auto it = entry.find("http_status"); it != entry.end() && it->is_number_integer()) {
    span.http_status = it->get<int>();
  }
  if (auto it = entry.find("error"); it != entry.end() && it->is_string()) {
    span.error = it->get<std::string>();
  }
}

void RequestLog::EndAttempt(nlohmann::json entry) {
  if (committed_ || attempt_started_ns_ < 0 || record_.attempts.empty()) return;
  EndAttemptSpan(entry);
  record_.attempts.back() = std::move(entry);
  attempt_started_ns_ = -1;
}

void RequestLog::Checkpoint() {
  if (committed_ || checkpoint_) return;
  // The record is journaled in place, as the success it will be if nothing else happens; the
  // fields that says are put back after, so that Commit() still sees what really happened.
  // (Copying the record instead cost more than journaling it.) The cost the recorder sets stays:
  // Commit() sets it again from the same price.
  const bool had_status = !record_.status.empty();
  const int http_status = record_.http_status;
  if (!had_status) record_.status = "ok";
  if (http_status == 0) record_.http_status = 200;
  record_.latency_us = ElapsedMicros();
  checkpoint_ = recorder_.Checkpoint(record_, price_);
  if (!had_status) record_.status.clear();
  record_.http_status = http_status;
}

void RequestLog::Commit() {
  if (committed_) return;
  committed_ = true;
  if (attempt_started_ns_ >= 0 && !record_.attempts.empty()) {
    nlohmann::json& open = record_.attempts.back();
    open["status"] = record_.status.empty() ? "ok" : record_.status;
    open["http_status"] = record_.upstream_status;
    open["latency_ms"] = double(clock_.MonotonicNanos() - attempt_started_ns_) / 1e6;
    EndAttemptSpan(open);
  }
  if (record_.status == "client_disconnected" && recorder_.shutdown_cut()) {
    record_.status = "shutdown";
    record_.error = "kvgate shut down before the response was complete (server.drain_timeout_ms "
                    "passed)";
  }
  record_.latency_us = ElapsedMicros();
  if (record_.status.empty()) record_.status = "ok";
  std::shared_ptr<const telemetry::PromptTexts> texts;
  if (prompt_ && record_.status == "ok") {
    record_.prompt_fingerprint =
        fingerprint_ ? std::move(fingerprint_)
                     : std::make_shared<const telemetry::PromptFingerprint>(
                           telemetry::Fingerprint(raw_json::Object(*prompt_)));
    // Only a thread's turn is ever compared with another: no text for the others.
    if (!record_.thread_id.empty()) texts = recorder_.CapturePromptTexts(raw_json::Object(*prompt_));
  }
  recorder_.Record(std::move(record_), price_, checkpoint_, std::move(texts));
}

}  // namespace kvgate::gateway

// One in-flight request's telemetry: filled in as the request moves along, recorded exactly once —
// on every path, including errors, client disconnects and coroutine teardown at shutdown.
#pragma once

#include <optional>
#include <string>

#include "common/clock.h"
#include "common/raw_json.h"
#include "gateway/recorder.h"
#include "telemetry/diagnosis.h"
#include "telemetry/pricing.h"
#include "telemetry/record.h"

namespace kvgate::gateway {

class RequestLog {
 public:
  RequestLog(Recorder& recorder, const Clock& clock, int64_t arrival_monotonic_ns);
  // Records with status "client_disconnected" if Commit() was never called (the coroutine was
  // destroyed mid-request: the client went away or the server shut down).
  ~RequestLog();
  RequestLog(const RequestLog&) = delete;
  RequestLog& operator=(const RequestLog&) = delete;

  telemetry::RequestRecord& record() { return record_; }
  void set_price(std::optional<telemetry::Price> price) { price_ = std::move(price); }
  // The request body whose prompt is fingerprinted for the thread's cache diagnosis. The hashing
  // waits for Commit(), which runs after the response went out, so it stays off the client's
  // latency path. REQUIRES: the bytes `body` views outlive this RequestLog.
  void set_prompt(raw_json::Value body) { prompt_ = body; }
  // The prompt's fingerprint when the request path already computed it (a router used it):
  // Commit then uses it instead of hashing the prompt again.
  void set_fingerprint(std::shared_ptr<const telemetry::PromptFingerprint> fingerprint) {
    fingerprint_ = std::move(fingerprint);
  }
  const std::shared_ptr<const telemetry::PromptFingerprint>& fingerprint() const {
    return fingerprint_;
  }
  // Marks the first content token sent to the client (streams); later calls are ignored.
  void MarkFirstToken();
  // The attempt loop's bookkeeping: an attempt's entry is added to record().attempts when it
  // starts; if the log commits while it runs (a stream's final event commits at once), Commit
  // fills the entry's outcome from the record itself. EndAttempt replaces the entry with the
  // attempt's own account, when the log is still open.
  void BeginAttempt(nlohmann::json entry);
  void EndAttempt(nlohmann::json entry);
  bool committed() const { return committed_; }
  // Sets the outcome the client saw.
  void SetError(int http_status, std::string status, std::string message);
  // Journals the record as a success as it stands, just before the answer's last bytes are
  // written (Recorder::Checkpoint): if the process dies after the client got them, the record
  // survives. Commit() later records the final outcome. Once per request; no-op after Commit.
  void Checkpoint();
  // Computes latency, then hands the record to the recorder. Idempotent.
  void Commit();

 private:
  int64_t ElapsedMicros() const;
  // Closes the open attempt's span (record().trace) with the outcome in its attempts entry.
  void EndAttemptSpan(const nlohmann::json& entry);

  Recorder& recorder_;
  const Clock& clock_;
  int64_t arrival_ns_;
  std::optional<telemetry::Price> price_;
  std::optional<raw_json::Value> prompt_;
  std::shared_ptr<const telemetry::PromptFingerprint> fingerprint_;
  telemetry::RequestRecord record_;
  bool committed_ = false;
  int64_t attempt_started_ns_ = -1;  // -1: no attempt open
  std::optional<telemetry::TelemetryStore::JournalMark> checkpoint_;
};

}  // namespace kvgate::gateway

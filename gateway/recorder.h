// Where every finished request goes: priced, diagnosed against its thread's previous turn, counted
// in the metrics, and queued for the store (and the monitors). Never blocks on disk.
// Thread safety: Record() may be called from any thread concurrently.
#pragma once

#include <atomic>
#include <cstdint>

#include <functional>
#include <memory>
#include <optional>

#include "common/raw_json.h"
#include "common/redact.h"
#include "router/router.h"
#include "telemetry/diagnosis.h"
#include "telemetry/metrics.h"
#include "telemetry/pricing.h"
#include "telemetry/record.h"
#include "telemetry/store.h"

namespace kvgate::gateway {

class Recorder {
 public:
  // `router` supplies each target's caching rules and learns from each recorded turn; all
  // references must outlive this. With `shared_threads` (several replicas on one database), a
  // thread's latest stored turn is read from the store (TelemetryStore::LatestThreadTurn) once
  // per request, before the thread is looked at, so that a turn another replica served is the one
  // compared with: the request path calls SyncThread off its event loop, and Record reads only
  // for a record whose request did not (RequestRecord::thread_synced).
  Recorder(telemetry::TelemetryStore& store, telemetry::GatewayMetrics& metrics,
           router::Router& router, bool shared_threads = false);

  // Extra consumers of finished records (the monitors); called just before the store gets the
  // record (which is asynchronous either way: a listener never sees it committed).
  void AddListener(std::function<void(const telemetry::RequestRecord&)> listener);
  // The keep-warm service's view of every finished record (gateway/keep_warm.h), after pricing and
  // diagnosis and before the metrics, the listeners and the store: it learns from the turn and
  // may set record.keep_warm_saved. Set before use; at most one.
  void SetKeepWarmObserver(std::function<void(telemetry::RequestRecord&)> observer) {
    keep_warm_observer_ = std::move(observer);
  }

  // Keeps the prompt text of threaded turns for the excerpts of prompt_changed diagnoses, with
  // what `redactor` knows (and anything shaped like a credential) taken out first (config
  // diagnosis.excerpts, on by default). Call before serving; without it no text is kept.
  void KeepPromptTexts(SecretRedactor redactor) { text_redactor_ = std::move(redactor); }
  // The text of a threaded turn's prompt to keep (telemetry::CapturePromptTexts), null when
  // texts are not kept. Runs after the answer went out (RequestLog::Commit).
  std::shared_ptr<const telemetry::PromptTexts> CapturePromptTexts(
      const raw_json::Object& request_body) const;

  // Fills record.cost (when `price` is known) and, for a successful turn of a thread that carries
  // its prompt_fingerprint, record.cache_diagnosis (with the rules of the target that served
  // it; "routed_away" when its route says a router moved the thread); lets the router learn from
  // it; then hands the record on. The fingerprint is kept (and stored) only for turns the tracker
  // compared. `texts` (CapturePromptTexts of its body) gives a prompt_changed diagnosis its
  // excerpt and is what the thread's next turn is compared with. A keep-warm ping (purpose
  // "keep_warm") is not a turn: it is not diagnosed, the router does not learn from it, and when it succeeded the tracker learns that the thread's
  // cache on its target was renewed (ThreadTracker::Renew).
  void Record(telemetry::RequestRecord record, const std::optional<telemetry::Price>& price,
              std::optional<telemetry::TelemetryStore::JournalMark> checkpoint = std::nullopt,
              std::shared_ptr<const telemetry::PromptTexts> texts = nullptr);
  // Journals `record` as it stands, priced (record.cost is set from `price` when known), before its
  // answer's last bytes leave the process (TelemetryStore::Checkpoint), so that a crash right
  // after cannot lose an answered request. The record is not copied: this runs on every request.
  std::optional<telemetry::TelemetryStore::JournalMark> Checkpoint(
      telemetry::RequestRecord& record, const std::optional<telemetry::Price>& price);

  // The thread's memory as the router sees it before a turn (telemetry::ThreadTracker::View).
  // Memory only: with shared_threads, call SyncThread first.
  telemetry::ThreadView View(const std::string& thread_id) const { return tracker_.View(thread_id); }

  // With shared_threads: gives the tracker the thread's latest stored turn when it is newer (one
  // indexed read; blocking, so not on an event loop). A no-op otherwise.
  bool shares_threads() const { return shared_threads_; }
  void SyncThread(const std::string& thread_id) const;

  // Gives the thread tracker the latest stored turn of each thread seen at or after `since_us` (as
  // many as it holds, newest first, from TelemetryStore::LatestThreadTurns), so that a restarted
  // gateway diagnoses a thread's next turn against its last one. Call before serving.
  struct Restored {
    size_t threads = 0;      // turns the tracker took
    int unreadable = 0;      // stored fingerprints that did not parse (skipped)
  };
  Result<Restored> RestoreThreads(int64_t since_us);

  // With shared_threads: stored turns taken because they were newer than the tracker's (another
  // replica served them), and reads of the store that failed (the tracker's memory was used).
  struct SharedStats {
    uint64_t taken = 0;
    uint64_t read_errors = 0;
  };
  SharedStats shared_stats() const {
    return {taken_.load(std::memory_order_relaxed), read_errors_.load(std::memory_order_relaxed)};
  }

  // From now on, requests that end without a complete response were cut by kvgate's shutdown
  // (the drain deadline passed), not abandoned by their clients; RequestLog records them so.
  void MarkShutdownCut() { shutdown_cut_.store(true, std::memory_order_relaxed); }
  bool shutdown_cut() const { return shutdown_cut_.load(std::memory_order_relaxed); }

 private:
  std::atomic<bool> shutdown_cut_{false};
  telemetry::TelemetryStore& store_;
  telemetry::GatewayMetrics& metrics_;
  router::Router& router_;
  const bool shared_threads_;
  // Mutable: with shared_threads, View() refreshes it from the store, a cache of the database's
  // threads (the tracker locks internally).
  mutable telemetry::ThreadTracker tracker_;
  mutable std::atomic<uint64_t> taken_{0}, read_errors_{0};
  std::vector<std::function<void(const telemetry::RequestRecord&)>> listeners_;  // set before use
  std::optional<SecretRedactor> text_redactor_;  // set before use; nullopt: no text kept
  std::function<void(telemetry::RequestRecord&)> keep_warm_observer_;          // set before use
};

}  // namespace kvgate::gateway

#include "gateway/auto_threads.h"

// Inlined, as diagnosis.cc uses it: the hashes run on every request without a thread.
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "common/ids.h"

namespace kvgate::gateway {
namespace {

// Tenants named by a gateway key and by a credential hash apart (different seeds).
constexpr uint64_t kKeySeed = 0x4B56474154454B59ULL;         // gateway key ids
constexpr uint64_t kCredentialSeed = 0x4B56474154454352ULL;  // upstream credentials

uint64_t Hash(uint64_t seed, std::string_view value) {
  return XXH3_64bits_withSeed(value.data(), value.size(), seed);
}

// Whether messages[index] (Chat, Messages) or input[index] (Responses) came from the model: an
// assistant message, or a Responses output item (reasoning, function_call, any other *_call).
bool FromModel(const raw_json::Object& body, int index) {
  std::optional<raw_json::Value> items = body.Find("messages");
  if (!items) items = body.Find("input");
  if (!items || !items->is_array() || index < 0) return false;
  std::optional<raw_json::Value> item;
  int i = 0;
  raw_json::ForEachElement(*items, [&](raw_json::Value v) {
    if (i++ == index) item = v;
  });
  if (!item || !item->is_object()) return false;
  if (std::optional<raw_json::Value> role = raw_json::Find(*item, "role")) {
    return raw_json::DecodeString(*role).value_or("") == "assistant";
  }
  std::optional<raw_json::Value> type = raw_json::Find(*item, "type");
  const std::string name = type ? raw_json::DecodeString(*type).value_or("") : "";
  return name == "reasoning" || (name.size() > 5 && name.ends_with("_call"));
}

// Each element's prefix key with the tools and system/developer messages left out (0 while
// there is none): the conversation alone, so that a system prompt that changes every turn
// still lets a turn be continued. The hashes come from the fingerprint's chunk hashes.
std::vector<uint64_t> ConversationPrefixes(const telemetry::PromptFingerprint& fingerprint) {
  std::vector<uint64_t> out;
  out.reserve(fingerprint.elements.size());
  uint64_t chain = 0;
  for (const telemetry::FingerprintElement& e : fingerprint.elements) {
    const bool system = e.kind != telemetry::FingerprintElement::Kind::kMessage || e.system_role;
    if (!system) {
      const uint64_t element =
          XXH3_64bits_withSeed(e.chunks.data(), e.chunks.size() * sizeof(uint32_t), e.length);
      const uint64_t pair[2] = {chain, element};
      chain = XXH3_64bits(pair, sizeof(pair)) | 1;  // never 0: 0 means "none yet"
    }
    out.push_back(chain);
  }
  return out;
}

// The exact keys: each element's prefix hash (the whole prompt up to it, byte for byte).
std::vector<uint64_t> ExactPrefixes(const telemetry::PromptFingerprint& fingerprint) {
  std::vector<uint64_t> out;
  out.reserve(fingerprint.elements.size());
  for (const telemetry::FingerprintElement& e : fingerprint.elements) out.push_back(e.prefix_hash);
  return out;
}

// Exact and conversation keys share one index; this keeps the two kinds apart.
constexpr uint64_t kConversationKey = 0x6A09E667F3BCC908ULL;

std::string NewThreadId() {
  // NewId's time-ordered digits after kvgate's own prefix for inferred threads (docs/api.md).
  const std::string id = NewId("a");
  return "auto-" + id.substr(2);
}

}  // namespace

size_t AutoThreads::KeyHash::operator()(const Key& k) const noexcept {
  return static_cast<size_t>(k.prompt ^ (k.tenant * 0x9E3779B97F4A7C15ULL));
}

AutoThreads::AutoThreads(size_t max_turns) : max_turns_(max_turns == 0 ? 1 : max_turns) {}

const AutoThreads::Turn* AutoThreads::FindContinued(uint64_t tenant, const raw_json::Object& body,
                                                    const telemetry::PromptFingerprint& fingerprint,
                                                    const std::vector<uint64_t>& prefixes) const {
  const auto& elements = fingerprint.elements;
  // Longest first: the previous turn's prompt ends at element j, its answer is element j + 1.
  for (size_t j = elements.size() >= 2 ? elements.size() - 1 : 0; j-- > 0;) {
    if (prefixes[j] == 0) continue;
    auto it = index_.find(Key{tenant, prefixes[j]});
    if (it == index_.end() || it->second.turns.empty()) continue;
    const telemetry::FingerprintElement& answer = elements[j + 1];
    if (answer.kind != telemetry::FingerprintElement::Kind::kMessage ||
        !FromModel(body, answer.message_index)) {
      continue;
    }
    const std::vector<Turn>& turns = it->second.turns;
    // The most recent turn still open (its thread's latest), else the most recent: a fork.
    for (auto t = turns.rbegin(); t != turns.rend(); ++t) {
      if (t->seq == t->thread->latest) return &*t;
    }
    return &turns.back();
  }
  return nullptr;
}

AutoThreads::Assignment AutoThreads::Assign(std::string_view request_id, uint64_t tenant,
                                            const raw_json::Object& body,
                                            const telemetry::PromptFingerprint& fingerprint) {
  Assignment out;
  if (fingerprint.elements.empty()) {
    out.thread_id = NewThreadId();
    return out;
  }
  const std::vector<uint64_t> exact = ExactPrefixes(fingerprint);
  std::vector<uint64_t> conversation = ConversationPrefixes(fingerprint);
  for (uint64_t& key : conversation) key = key == 0 ? 0 : key ^ kConversationKey;
  MutexLock lock(&mu_);
  std::shared_ptr<Thread> thread;
  const Turn* continued = FindContinued(tenant, body, fingerprint, exact);
  if (continued == nullptr) continued = FindContinued(tenant, body, fingerprint, conversation);
  if (continued != nullptr) {
    if (continued->seq == continued->thread->latest) {
      thread = continued->thread;
    } else {
      out.parent = continued->thread->id;  // another request continued that turn first
    }
  }
  if (!thread) thread = std::make_shared<Thread>(Thread{.id = NewThreadId()});
  out.thread_id = thread->id;
  Turn turn{.thread = thread, .seq = thread->next_seq++, .stamp = next_stamp_++};
  InFlight pending{.exact = Key{tenant, exact.back()},
                   .conversation = Key{tenant, conversation.back()},
                   .turn = turn,
                   .previous_latest = thread->latest};
  thread->latest = turn.seq;
  Insert(pending.exact, turn);
  if (pending.conversation.prompt != 0) Insert(pending.conversation, turn);
  in_flight_.insert_or_assign(std::string(request_id), std::move(pending));
  return out;
}

void AutoThreads::Settle(const telemetry::RequestRecord& record) {
  if (record.thread_source != telemetry::kThreadFromAuto) return;
  MutexLock lock(&mu_);
  auto it = in_flight_.find(record.request_id);
  if (it == in_flight_.end()) return;
  if (record.status != "ok") {
    InFlight& failed = it->second;
    Remove(failed.exact, failed.turn);
    Remove(failed.conversation, failed.turn);
    if (failed.turn.thread->latest == failed.turn.seq) {
      failed.turn.thread->latest = failed.previous_latest;
    }
  }
  in_flight_.erase(it);
}

size_t AutoThreads::size() const {
  MutexLock lock(&mu_);
  return turns_;
}

void AutoThreads::Insert(const Key& key, Turn turn) {
  order_.emplace_back(key, turn.stamp);
  index_[key].turns.push_back(std::move(turn));
  ++turns_;
  // Oldest first; a slot keeps its few most recent turns (conversations that opened alike).
  constexpr size_t kTurnsPerPrompt = 8;
  Slot& slot = index_[key];
  if (slot.turns.size() > kTurnsPerPrompt) {
    slot.turns.erase(slot.turns.begin());
    --turns_;
  }
  while (turns_ > max_turns_ || order_.size() > 2 * max_turns_) {
    auto [old_key, stamp] = order_.front();
    order_.pop_front();
    auto it = index_.find(old_key);
    if (it == index_.end()) continue;
    Remove(old_key, Turn{.stamp = stamp});
  }
}

void AutoThreads::Remove(const Key& key, const Turn& turn) {
  auto it = index_.find(key);
  if (it == index_.end()) return;
  std::vector<Turn>& turns = it->second.turns;
  for (auto t = turns.begin(); t != turns.end(); ++t) {
    if (t->stamp != turn.stamp) continue;
    turns.erase(t);
    --turns_;
    break;
  }
  if (turns.empty()) index_.erase(it);
}

uint64_t TenantOf(std::string_view api_key_id, std::string_view authorization,
                  std::string_view x_api_key, std::string_view api_key,
                  std::string_view goog_api_key) {
  if (!api_key_id.empty()) return Hash(kKeySeed, api_key_id);
  for (std::string_view credential : {authorization, x_api_key, api_key, goog_api_key}) {
    if (!credential.empty()) return Hash(kCredentialSeed, credential);
  }
  return 0;
}

}  // namespace kvgate::gateway

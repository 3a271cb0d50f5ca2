#include "telemetry/diagnosis.h"

#include <gtest/gtest.h>

#include <thread>

namespace kvgate::telemetry {
namespace {

using nlohmann::json;

constexpr CacheRules kOpenAI{.min_tokens = 1024, .granularity = 128, .ttl_seconds = 300};
constexpr CacheRules kAnthropic{
    .min_tokens = 1024, .granularity = 1, .ttl_seconds = 300, .automatic = false};

constexpr int64_t kT0 = 1'767'225'600'000'000;

// Fingerprint of the bytes a client would send for `body` (nlohmann's compact dump).
PromptFingerprint Fingerprint(const json& body) {
  const std::string text = body.dump();
  return telemetry::Fingerprint(raw_json::Object(raw_json::Parse(text).value()));
}
std::shared_ptr<const PromptFingerprint> Fp(const json& body) {
  return std::make_shared<const PromptFingerprint>(Fingerprint(body));
}

PromptFingerprint FingerprintOfText(std::string_view text) {
  return telemetry::Fingerprint(raw_json::Object(raw_json::Parse(text).value()));
}

json Body(const std::string& system, int user_turns) {
  json messages = json::array();
  messages.push_back({{"role", "system"}, {"content", system}});
  for (int i = 0; i < user_turns; ++i) {
    messages.push_back({{"role", "user"}, {"content", "question " + std::to_string(i)}});
    if (i + 1 < user_turns) {
      messages.push_back({{"role", "assistant"}, {"content", "answer " + std::to_string(i)}});
    }
  }
  return {{"model", "gpt-4o"}, {"messages", messages}};
}

const std::string kSystem(3000, 's');

RequestRecord Turn(int64_t at_seconds, int64_t read, int64_t uncached, int64_t write = 0) {
  RequestRecord r;
  r.thread_id = "thr_1";
  r.model = "gpt-4o";
  r.provider = "openai";
  r.created_at_us = kT0 + at_seconds * 1'000'000;
  r.usage.cache_read = read;
  r.usage.cache_write_5m = write;
  r.usage.cache_write_1h = 0;
  r.usage.cache_write_no_ttl = 0;
  r.usage.uncached = uncached;
  r.usage.output = 50;
  return r;
}

TEST(FingerprintTest, MinifiedAndOrderedToolsSystemMessages) {
  const std::string a = R"({"system":"S","tools":[{"type":"function"}],
      "messages":[{"role":"user","content":"hi"}]})";
  // The same elements, other top-level order, other whitespace.
  const std::string b = R"({ "messages" : [ { "role" : "user", "content" : "hi" } ],
      "tools": [ {"type": "function"} ], "system": "S" })";
  // Key order inside a message is part of its bytes.
  const std::string c = R"({"system":"S","tools":[{"type":"function"}],
      "messages":[{"content":"hi","role":"user"}]})";
  PromptFingerprint fa = FingerprintOfText(a);
  ASSERT_EQ(fa.elements.size(), 3u);
  EXPECT_EQ(fa.elements[0].kind, FingerprintElement::Kind::kTools);
  EXPECT_EQ(fa.elements[1].kind, FingerprintElement::Kind::kSystem);
  EXPECT_EQ(fa.elements[2].kind, FingerprintElement::Kind::kMessage);
  EXPECT_EQ(fa.elements[2].message_index, 0);
  EXPECT_EQ(fa.elements[2].length, std::string(R"({"role":"user","content":"hi"})").size());
  EXPECT_EQ(fa, FingerprintOfText(b));
  PromptFingerprint fc = FingerprintOfText(c);
  EXPECT_EQ(fc.elements[1], fa.elements[1]);
  EXPECT_NE(fc.elements[2].prefix_hash, fa.elements[2].prefix_hash);
  EXPECT_TRUE(Fingerprint(json("not an object")).elements.empty());
  EXPECT_TRUE(Fingerprint(json::parse(R"({"messages": 3})")).elements.empty());
}

TEST(FingerprintTest, CacheBreakpointsAreNotPartOfThePrompt) {
  // Turn 1 marks its question; turn 2 moves the mark to the new question.
  const std::string turn1 = R"({"messages":[{"role":"user","content":[{"type":"text",
      "text":"first","cache_control":{"type":"ephemeral"}}]}]})";
  const std::string turn2 = R"({"messages":[{"role":"user","content":[{"type":"text",
      "text":"first"}]},{"role":"assistant","content":"a"},{"role":"user","content":[
      {"type":"text","text":"second","cache_control":{"type":"ephemeral","ttl":"5m"}}]}]})";
  PromptFingerprint a = FingerprintOfText(turn1);
  PromptFingerprint b = FingerprintOfText(turn2);
  ASSERT_EQ(b.elements.size(), 3u);
  EXPECT_EQ(a.elements[0], b.elements[0]);
  EXPECT_TRUE(ComparePrefixes(a, b).previous_intact);
  EXPECT_EQ(b.elements[2].length,
            std::string(R"({"role":"user","content":[{"type":"text","text":"second"}]})").size());
}

TEST(FingerprintTest, ResponsesApiInstructionsAndInputItems) {
  // A Responses API body: instructions are the system element, each input item a message.
  const std::string turn1 = R"({"model":"gpt-4.1","instructions":"Be brief.",
      "input":[{"role":"user","content":"first"}]})";
  const std::string turn2 = R"({"model":"gpt-4.1","instructions":"Be brief.",
      "input":[{"role":"user","content":"first"},{"role":"assistant","content":"a"},
      {"role":"user","content":[{"type":"input_text","text":"second"}]}]})";
  PromptFingerprint a = FingerprintOfText(turn1);
  PromptFingerprint b = FingerprintOfText(turn2);
  ASSERT_EQ(a.elements.size(), 2u);
  EXPECT_EQ(a.elements[0].kind, FingerprintElement::Kind::kSystem);
  EXPECT_EQ(a.elements[1].kind, FingerprintElement::Kind::kMessage);
  ASSERT_EQ(b.elements.size(), 4u);
  EXPECT_EQ(b.elements[3].message_index, 2);
  EXPECT_TRUE(ComparePrefixes(a, b).previous_intact);
  // Other instructions: the prompt changed at the system element.
  const std::string other = R"({"instructions":"Be long.","input":[{"role":"user",
      "content":"first"}]})";
  PrefixComparison changed = ComparePrefixes(a, FingerprintOfText(other));
  EXPECT_FALSE(changed.previous_intact);
  EXPECT_EQ(changed.diverged_kind, FingerprintElement::Kind::kSystem);
  // A string input is one message.
  PromptFingerprint text = FingerprintOfText(R"({"input":"hello there"})");
  ASSERT_EQ(text.elements.size(), 1u);
  EXPECT_EQ(text.elements[0].kind, FingerprintElement::Kind::kMessage);
  EXPECT_EQ(text.elements[0].length, std::string(R"("hello there")").size());
}


TEST(FingerprintTest, AnthropicMessagesSystemBlocksToolsAndMessages) {
  // An Anthropic Messages body (POST /v1/messages): tools, then the system blocks, then each
  // message, the order Anthropic caches in; breakpoints moving between turns change nothing.
  const std::string tools = R"("tools":[{"name":"f","input_schema":{"type":"object"},
      "cache_control":{"type":"ephemeral","ttl":"1h"}}])";
  const std::string turn1 = "{" + tools + R"(,"model":"claude-sonnet-4-5","max_tokens":64,
      "system":[{"type":"text","text":"You are terse.","cache_control":{"type":"ephemeral"}}],
      "messages":[{"role":"user","content":[{"type":"text","text":"first",
        "cache_control":{"type":"ephemeral"}}]}]})";
  const std::string turn2 = "{" + tools + R"(,"model":"claude-sonnet-4-5","max_tokens":64,
      "system":[{"type":"text","text":"You are terse."}],
      "messages":[{"role":"user","content":[{"type":"text","text":"first"}]},
        {"role":"assistant","content":[{"type":"text","text":"a"}]},
        {"role":"user","content":[{"type":"text","text":"second",
          "cache_control":{"type":"ephemeral"}}]}]})";
  PromptFingerprint a = FingerprintOfText(turn1);
  PromptFingerprint b = FingerprintOfText(turn2);
  ASSERT_EQ(a.elements.size(), 3u);
  EXPECT_EQ(a.elements[0].kind, FingerprintElement::Kind::kTools);
  EXPECT_EQ(a.elements[1].kind, FingerprintElement::Kind::kSystem);
  EXPECT_EQ(a.elements[2].kind, FingerprintElement::Kind::kMessage);
  EXPECT_TRUE(ComparePrefixes(a, b).previous_intact);
  // A changed system prompt is found at the system element, past the tools.
  std::string edited = turn2;
  edited.replace(edited.find("You are terse."), 14, "You are chatty");
  PrefixComparison changed = ComparePrefixes(b, FingerprintOfText(edited));
  EXPECT_FALSE(changed.previous_intact);
  EXPECT_EQ(changed.common_elements, 1u);
  EXPECT_EQ(changed.diverged_kind, FingerprintElement::Kind::kSystem);
}
TEST(FingerprintTest, JsonRoundTripAndRejectsCorruption) {
  PromptFingerprint fp = Fingerprint(Body(kSystem, 3));
  json stored = json::parse(ToJsonText(fp));
  ASSERT_TRUE(stored.is_array());
  ASSERT_EQ(stored.size(), fp.elements.size());
  EXPECT_EQ(stored[0]["k"], "message");
  EXPECT_EQ(stored[0]["i"], 0);
  EXPECT_EQ(stored[1]["i"], 1);
  EXPECT_EQ(stored[1]["h"].get<std::string>().size(), 16u);
  // An Anthropic-style top-level system prompt is its own element, without a message index.
  json top = json::parse(ToJsonText(Fingerprint(json{{"system", "be brief"}, {"messages", json::array()}})));
  ASSERT_EQ(top.size(), 1u);
  EXPECT_EQ(top[0]["k"], "system");
  EXPECT_FALSE(top[0].contains("i"));
  EXPECT_EQ(FromJson(top)->elements.size(), 1u);
  auto back = FromJson(json::parse(stored.dump()));
  ASSERT_TRUE(back.has_value()) << back.error().ToString();
  EXPECT_EQ(*back, fp);

  json corrupt = stored;
  corrupt[0]["n"] = 5;  // length no longer matches the chunk list
  EXPECT_FALSE(FromJson(corrupt).has_value());
  corrupt = stored;
  corrupt[0]["c"] = "!!!!";
  EXPECT_FALSE(FromJson(corrupt).has_value());
  corrupt = stored;
  corrupt[1]["k"] = "banana";
  EXPECT_FALSE(FromJson(corrupt).has_value());
  EXPECT_FALSE(FromJson(json::object()).has_value());
}

TEST(FingerprintTest, ComparisonFindsMessageAndCharacter) {
  json before = Body(kSystem, 2);
  json after = Body(kSystem, 3);
  // An appended turn keeps the previous prompt intact.
  PrefixComparison grow = ComparePrefixes(Fingerprint(before), Fingerprint(after));
  EXPECT_TRUE(grow.previous_intact);
  EXPECT_EQ(grow.common_elements, 4u);

  // Edit the system prompt at content character 1000: canonical JSON is
  // {"content":"sss...","role":"system"}, content starts at byte 12.
  json edited = after;
  std::string text = kSystem;
  text[1000] = 'X';
  edited["messages"][0]["content"] = text;
  PrefixComparison cmp = ComparePrefixes(Fingerprint(before), Fingerprint(edited));
  EXPECT_FALSE(cmp.previous_intact);
  EXPECT_EQ(cmp.common_elements, 0u);
  ASSERT_TRUE(cmp.diverged_kind.has_value());
  EXPECT_EQ(cmp.diverged_message_index, 0);
  const uint64_t byte = 12 + 1000;
  EXPECT_EQ(cmp.diverged_char_offset, byte / 64 * 64);
  EXPECT_LE(cmp.diverged_char_offset, byte);
  EXPECT_GT(cmp.diverged_char_offset + 64, byte);

  // A change in the last user message of the previous turn.
  json late = after;
  late["messages"][3]["content"] = "question 1 (edited)";
  PrefixComparison lc = ComparePrefixes(Fingerprint(before), Fingerprint(late));
  EXPECT_EQ(lc.common_elements, 3u);
  EXPECT_EQ(lc.diverged_message_index, 3);
}

TEST(ThreadTrackerTest, FirstTurnAndNoThreadIdGiveNull) {
  ThreadTracker tracker;
  RequestRecord first = Turn(0, 0, 900);
  EXPECT_FALSE(tracker.Diagnose(first, Fp(Body(kSystem, 1)), kOpenAI).has_value());
  RequestRecord anon = Turn(10, 0, 900);
  anon.thread_id.clear();
  EXPECT_FALSE(tracker.Diagnose(anon, Fp(Body(kSystem, 1)), kOpenAI).has_value());
  EXPECT_EQ(tracker.Size(), 1u);
}

TEST(ThreadTrackerTest, ReadsAsExpectedGiveNull) {
  ThreadTracker tracker;
  ASSERT_FALSE(tracker.Diagnose(Turn(0, 0, 1100), Fp(Body(kSystem, 1)), kOpenAI));
  // 1100 previous tokens -> 1024 cacheable (128-token steps from 1024); 1024 read: as expected.
  auto d = tracker.Diagnose(Turn(30, 1024, 100), Fp(Body(kSystem, 2)), kOpenAI);
  EXPECT_FALSE(d.has_value()) << d->ToJson().dump();
  // One granularity step short is still within tolerance.
  d = tracker.Diagnose(Turn(60, 1024, 300), Fp(Body(kSystem, 3)), kOpenAI);
  EXPECT_FALSE(d.has_value()) << d->ToJson().dump();
}

TEST(ThreadTrackerTest, UnknownUsageIsNotJudged) {
  ThreadTracker tracker;
  ASSERT_FALSE(tracker.Diagnose(Turn(0, 0, 2000), Fp(Body(kSystem, 1)), kOpenAI));
  RequestRecord unknown = Turn(400, 0, 2100);
  unknown.usage.cache_read.reset();  // e.g. vLLM without --enable-prompt-tokens-details
  EXPECT_FALSE(tracker.Diagnose(unknown, Fp(Body(kSystem, 2)), kOpenAI).has_value());
  // And the turn after an unknown one cannot be judged for automatic caching either.
  RequestRecord next = Turn(800, 0, 2200);
  EXPECT_FALSE(tracker.Diagnose(next, Fp(Body(kSystem, 3)), kOpenAI).has_value());
}

TEST(ThreadTrackerTest, ExpiredAfterIdleBeyondTtl) {
  ThreadTracker tracker;
  ASSERT_FALSE(tracker.Diagnose(Turn(0, 0, 2000), Fp(Body(kSystem, 1)), kOpenAI));
  auto d = tracker.Diagnose(Turn(301, 0, 2100), Fp(Body(kSystem, 2)), kOpenAI);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->cause, "expired");
  EXPECT_EQ(d->expected_cached, 1920);
  EXPECT_EQ(d->cached, 0);
  json j = d->ToJson();
  EXPECT_EQ(j["cause"], "expired");
  EXPECT_DOUBLE_EQ(j["idle_seconds"].get<double>(), 301.0);
  EXPECT_FALSE(j["detail"].get<std::string>().empty());
}

// A keep-warm ping renewed the cache at 250 s: the turn at 400 s is 150 s from that renewal, so
// its reads are expected (and their absence would be an eviction, not an expiry). The ping is no
// turn: the thread's turn count and gaps are the real turns'.
TEST(ThreadTrackerTest, RenewalByAPingIsNotAnExpiry) {
  ThreadTracker tracker;
  ASSERT_FALSE(tracker.Diagnose(Turn(0, 0, 2000), Fp(Body(kSystem, 1)), kOpenAI));
  EXPECT_FALSE(tracker.Renew("unknown", "", kT0));
  // (The turns name no router, so their target is the model they asked for.)
  EXPECT_TRUE(tracker.Renew("thr_1", "gpt-4o", kT0 + 250'000'000));
  EXPECT_EQ(tracker.View("thr_1").turns, 1);
  auto d = tracker.Diagnose(Turn(400, 0, 2100), Fp(Body(kSystem, 2)), kOpenAI);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->cause, "partial_eviction");  // 150 s after the renewal: not expired
  const ThreadView view = tracker.View("thr_1");
  EXPECT_EQ(view.turns, 2);
  ASSERT_EQ(view.recent_gaps.size(), 1u);
  EXPECT_DOUBLE_EQ(view.recent_gaps[0], 400.0);
  // Renewed again at 500 s, then nothing read at 700 s: evicted, not expired.
  tracker.Renew("thr_1", "gpt-4o", kT0 + 500'000'000);
  d = tracker.Diagnose(Turn(700, 0, 2300), Fp(Body(kSystem, 3)), kOpenAI);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->cause, "partial_eviction");
  EXPECT_DOUBLE_EQ(d->idle_seconds, 200.0);
}

TEST(ThreadTrackerTest, ZeroReadsBeforeTtlIsEviction) {
  ThreadTracker tracker;
  ASSERT_FALSE(tracker.Diagnose(Turn(0, 0, 2000), Fp(Body(kSystem, 1)), kOpenAI));
  auto d = tracker.Diagnose(Turn(60, 0, 2100), Fp(Body(kSystem, 2)), kOpenAI);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->cause, "partial_eviction");
}

TEST(ThreadTrackerTest, NoTtlMeansNeverExpired) {
  // Self-hosted engines evict under memory pressure only.
  CacheRules engine{.min_tokens = 0, .granularity = 16, .ttl_seconds = std::nullopt};
  ThreadTracker tracker;
  ASSERT_FALSE(tracker.Diagnose(Turn(0, 0, 2000), Fp(Body(kSystem, 1)), engine));
  auto d = tracker.Diagnose(Turn(86'400, 0, 2100), Fp(Body(kSystem, 2)), engine);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->cause, "partial_eviction");
  EXPECT_EQ(d->expected_cached, 2000);
}

TEST(ThreadTrackerTest, PartialEviction) {
  ThreadTracker tracker;
  ASSERT_FALSE(tracker.Diagnose(Turn(0, 0, 4000), Fp(Body(kSystem, 1)), kOpenAI));
  auto d = tracker.Diagnose(Turn(20, 1024, 3100), Fp(Body(kSystem, 2)), kOpenAI);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->cause, "partial_eviction");
  EXPECT_EQ(d->expected_cached, 3968);
  EXPECT_EQ(d->cached, 1024);
}

TEST(ThreadTrackerTest, PromptChangedNamesMessageAndCharacter) {
  ThreadTracker tracker;
  ASSERT_FALSE(tracker.Diagnose(Turn(0, 0, 2000), Fp(Body(kSystem, 1)), kOpenAI));
  json edited = Body(kSystem, 2);
  std::string text = kSystem;
  text[200] = '!';  // e.g. a timestamp in the system prompt
  edited["messages"][0]["content"] = text;
  auto d = tracker.Diagnose(Turn(20, 0, 2100), Fp(edited), kOpenAI);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->cause, "prompt_changed");
  json j = d->ToJson();
  EXPECT_EQ(j["message_index"], 0);
  EXPECT_EQ(j["element"], "message");
  EXPECT_EQ(j["char_offset"], (12 + 200) / 64 * 64);
  EXPECT_EQ(j["role"], "system");
  EXPECT_EQ(j["message_number"], 1);
  EXPECT_NE(j["detail"].get<std::string>().find("the system prompt (message 1) changed"),
            std::string::npos)
      << j.dump();
}

TEST(ThreadTrackerTest, PromptChangedInToolsNamesTools) {
  ThreadTracker tracker;
  json a = Body(kSystem, 1);
  a["tools"] = json::array({{{"type", "function"}, {"function", {{"name", "search"}}}}});
  ASSERT_FALSE(tracker.Diagnose(Turn(0, 0, 2000), Fp(a), kOpenAI));
  json b = Body(kSystem, 2);
  b["tools"] = json::array({{{"type", "function"}, {"function", {{"name", "lookup"}}}}});
  auto d = tracker.Diagnose(Turn(20, 0, 2100), Fp(b), kOpenAI);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->cause, "prompt_changed");
  EXPECT_EQ(d->ToJson()["element"], "tools");
  EXPECT_FALSE(d->message_index.has_value());
}

TEST(ThreadTrackerTest, ModelSwitch) {
  ThreadTracker tracker;
  ASSERT_FALSE(tracker.Diagnose(Turn(0, 0, 2000), Fp(Body(kSystem, 1)), kOpenAI));
  RequestRecord switched = Turn(20, 0, 2100);
  switched.model = "gpt-4o-mini";
  auto d = tracker.Diagnose(switched, Fp(Body(kSystem, 2)), kOpenAI);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->cause, "model_switch");
  EXPECT_EQ(d->ToJson()["previous_model"], "gpt-4o");
  // Same model, another provider: also a switch.
  RequestRecord other = Turn(40, 0, 2200);
  other.model = "gpt-4o-mini";
  other.provider = "azure";
  d = tracker.Diagnose(other, Fp(Body(kSystem, 3)), kOpenAI);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->cause, "model_switch");
  EXPECT_EQ(d->ToJson()["previous_provider"], "openai");
}

TEST(ThreadTrackerTest, BelowMinimum) {
  ThreadTracker tracker;
  const std::string short_system(100, 'q');
  ASSERT_FALSE(tracker.Diagnose(Turn(0, 0, 300), Fp(Body(short_system, 1)), kOpenAI));
  auto d = tracker.Diagnose(Turn(10, 0, 400), Fp(Body(short_system, 2)), kOpenAI);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->cause, "below_minimum");
  EXPECT_EQ(d->ToJson()["min_tokens"], 1024);
  // A provider without a minimum has nothing to say about the same short prompt.
  CacheRules no_min = kOpenAI;
  no_min.min_tokens = 0;
  no_min.granularity = 1;
  d = tracker.Diagnose(Turn(20, 400, 100), Fp(Body(short_system, 3)), no_min);
  EXPECT_FALSE(d.has_value());
}

TEST(ThreadTrackerTest, ExplicitCachingExpectsOnlyWhatWasWritten) {
  ThreadTracker tracker;
  // Anthropic-style: the first turn wrote 1500 tokens at a breakpoint, 500 left uncached.
  ASSERT_FALSE(tracker.Diagnose(Turn(0, 0, 500, 1500), Fp(Body(kSystem, 1)), kAnthropic));
  auto d = tracker.Diagnose(Turn(20, 1500, 700), Fp(Body(kSystem, 2)), kAnthropic);
  EXPECT_FALSE(d.has_value()) << d->ToJson().dump();
  // Reads falling short of what the previous turn read are judged as usual.
  auto short_read =
      tracker.Diagnose(Turn(40, 200, 2300), Fp(Body(kSystem, 3)), kAnthropic);
  ASSERT_TRUE(short_read.has_value());
  EXPECT_EQ(short_read->cause, "partial_eviction");
  EXPECT_EQ(short_read->expected_cached, 1500);
  // A thread whose turns mark nothing (no writes, no reads) leaves nothing to expect.
  RequestRecord plain = Turn(0, 0, 2500);
  plain.thread_id = "thr_plain";
  ASSERT_FALSE(tracker.Diagnose(plain, Fp(Body(kSystem, 1)), kAnthropic));
  plain.created_at_us += 20'000'000;
  plain.usage.uncached = 2600;
  EXPECT_FALSE(tracker.Diagnose(plain, Fp(Body(kSystem, 2)), kAnthropic).has_value());
}

TEST(ThreadTrackerTest, OneHourWritesExtendTheTtl) {
  ThreadTracker tracker;
  RequestRecord first = Turn(0, 0, 100);
  first.usage.cache_write_1h = 2000;
  ASSERT_FALSE(tracker.Diagnose(first, Fp(Body(kSystem, 1)), kAnthropic));
  // 10 minutes idle: past the 5-minute TTL but within the 1-hour one, so not "expired".
  auto d = tracker.Diagnose(Turn(600, 0, 2200), Fp(Body(kSystem, 2)), kAnthropic);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->cause, "partial_eviction");
}

TEST(ThreadTrackerTest, LruForgetsLeastRecentlyUsedThreads) {
  EXPECT_EQ(ThreadTracker({.max_threads = 10, .shards = 4}).capacity(), 8u);
  ThreadTracker tracker({.max_threads = 2, .shards = 1});
  EXPECT_EQ(tracker.capacity(), 2u);
  auto turn_of = [](const std::string& thread, int64_t at) {
    RequestRecord r = Turn(at, 0, 2000);
    r.thread_id = thread;
    return r;
  };
  const auto fp = Fp(Body(kSystem, 1));
  tracker.Diagnose(turn_of("a", 0), fp, kOpenAI);
  tracker.Diagnose(turn_of("b", 1), fp, kOpenAI);
  tracker.Diagnose(turn_of("a", 2), fp, kOpenAI);  // a is now the most recent
  tracker.Diagnose(turn_of("c", 3), fp, kOpenAI);  // evicts b
  EXPECT_EQ(tracker.Size(), 2u);
  // b is new again: its turn is a first turn (null) even though reads are 0 after 400 s.
  EXPECT_FALSE(tracker.Diagnose(turn_of("b", 400), fp, kOpenAI).has_value());
  // b's return evicted c, the one-turn thread, not a, which has two turns: 402 s idle with 0
  // reads -> expired.
  auto d = tracker.Diagnose(turn_of("a", 402), fp, kOpenAI);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->cause, "expired");
  EXPECT_FALSE(tracker.Diagnose(turn_of("c", 403), fp, kOpenAI).has_value());  // forgotten
  tracker.Forget("a");
  EXPECT_EQ(tracker.Size(), 1u);
}

TEST(ThreadTrackerTest, ConversationsOutliveABurstOfOneTurnThreads) {
  // One-shot requests (each its own automatic thread) arrive far more often than conversations'
  // turns; they must not push the conversations out of the tracker's memory.
  ThreadTracker tracker({.max_threads = 20, .shards = 1});
  auto turn_of = [](const std::string& thread, int64_t at) {
    RequestRecord r = Turn(at, 0, 2000);
    r.thread_id = thread;
    return r;
  };
  const auto fp = Fp(Body(kSystem, 1));
  for (int i = 0; i < 10; ++i) {
    tracker.Diagnose(turn_of("conversation-" + std::to_string(i), 0), fp, kOpenAI);
    tracker.Diagnose(turn_of("conversation-" + std::to_string(i), 1), fp, kOpenAI);
  }
  for (int i = 0; i < 1000; ++i) {
    tracker.Diagnose(turn_of("one-shot-" + std::to_string(i), 2), fp, kOpenAI);
  }
  EXPECT_EQ(tracker.Size(), 20u);
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(tracker.View("conversation-" + std::to_string(i)).turns, 2) << i;
  }
  // New threads still get room to reach their second turn.
  tracker.Diagnose(turn_of("late", 3), fp, kOpenAI);
  tracker.Diagnose(turn_of("late", 4), fp, kOpenAI);
  EXPECT_EQ(tracker.View("late").turns, 2);
}

TEST(ThreadTrackerTest, RestoredTurnIsComparedWithTheThreadsNextTurn) {
  // A turn read back from the store (with its fingerprint), as a restarted gateway restores it.
  RequestRecord stored = Turn(0, 0, 2000);
  stored.prompt_fingerprint = Fp(Body(kSystem, 1));
  json edited = Body(kSystem, 2);
  edited["messages"][0]["content"] = "EDITED " + kSystem;
  {
    ThreadTracker tracker;
    ASSERT_TRUE(tracker.Restore(stored));
    auto d = tracker.Diagnose(Turn(20, 0, 2100), Fp(edited), kOpenAI);
    ASSERT_TRUE(d.has_value());
    EXPECT_EQ(d->cause, "prompt_changed");
    EXPECT_EQ(d->message_index, 0);
  }
  {
    // Without the restore, the same turn is a thread's first: nothing to compare with.
    ThreadTracker tracker;
    EXPECT_FALSE(tracker.Diagnose(Turn(20, 0, 2100), Fp(edited), kOpenAI).has_value());
  }
  {
    // A thread the tracker already knows keeps its (newer) in-memory turn.
    ThreadTracker tracker;
    ASSERT_FALSE(tracker.Diagnose(Turn(10, 0, 2000), Fp(edited), kOpenAI));
    EXPECT_FALSE(tracker.Restore(stored));
    json next = edited;
    next["messages"].push_back({{"role", "user"}, {"content", "one more"}});
    // Against the in-memory turn the prefix is intact (the restored one would say prompt_changed).
    auto d = tracker.Diagnose(Turn(20, 0, 2100), Fp(next), kOpenAI);
    ASSERT_TRUE(d.has_value());
    EXPECT_EQ(d->cause, "partial_eviction");
  }
  ThreadTracker tracker;
  RequestRecord no_thread = stored;
  no_thread.thread_id.clear();
  EXPECT_FALSE(tracker.Restore(no_thread));
  RequestRecord no_fingerprint = stored;
  no_fingerprint.prompt_fingerprint.reset();
  EXPECT_FALSE(tracker.Restore(no_fingerprint));
  EXPECT_EQ(tracker.Size(), 0u);
}

TEST(ThreadTrackerTest, AbsorbedNewerTurnFromAnotherReplicaIsTheOneComparedWith) {
  // Replica A served turn 1 at 0 s and turn 2 went to replica B at 100 s; A now diagnoses turn 3
  // at 150 s. Absorbing B's stored turn 2 makes the idle time 50 s (not 150) and the prefix
  // turn 2's.
  ThreadTracker tracker;
  ASSERT_FALSE(tracker.Diagnose(Turn(0, 0, 2000), Fp(Body(kSystem, 1)), kOpenAI));
  RequestRecord elsewhere = Turn(100, 1920, 180);
  elsewhere.request_id = "req_b";
  elsewhere.prompt_fingerprint = Fp(Body(kSystem, 2));
  EXPECT_TRUE(tracker.Absorb(elsewhere));
  EXPECT_FALSE(tracker.Absorb(elsewhere)) << "the same turn twice";
  RequestRecord older = Turn(50, 0, 2000);
  older.prompt_fingerprint = Fp(Body(kSystem, 1));
  EXPECT_FALSE(tracker.Absorb(older)) << "an older stored turn never moves the thread back";
  EXPECT_EQ(tracker.View("thr_1").turns, 2);
  auto d = tracker.Diagnose(Turn(150, 0, 2300), Fp(Body(kSystem, 3)), kOpenAI);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->cause, "partial_eviction");
  EXPECT_DOUBLE_EQ(d->ToJson()["idle_seconds"].get<double>(), 50.0);
  EXPECT_GT(d->expected_cached, 1920) << "turn 2's longer prompt, not turn 1's";
  // An unknown thread is taken as Restore takes it; without a fingerprint nothing is.
  ThreadTracker fresh;
  EXPECT_TRUE(fresh.Absorb(elsewhere));
  RequestRecord bare = elsewhere;
  bare.prompt_fingerprint.reset();
  bare.thread_id = "thr_2";
  EXPECT_FALSE(fresh.Absorb(bare));
  EXPECT_EQ(fresh.Size(), 1u);
}

// A turn that replaces its last message (a regeneration, an edited question) shares everything
// before it: reads of that shared prefix are all the cache can give, so nothing is flagged, however
// long the replaced message was.
TEST(ThreadTrackerTest, ReplacingTheLastMessageIsNotADrop) {
  ThreadTracker tracker;
  json first = Body(kSystem, 1);
  first["messages"][1]["content"] = std::string(6000, 'p');  // a long pasted question
  ASSERT_FALSE(tracker.Diagnose(Turn(0, 0, 3000), Fp(first), kOpenAI));
  json replaced = Body(kSystem, 1);
  replaced["messages"][1]["content"] = "a short question instead";
  // The system prompt (about a third of the bytes) is what the two prompts share.
  auto d = tracker.Diagnose(Turn(30, 1024, 100), Fp(replaced), kOpenAI);
  EXPECT_FALSE(d.has_value()) << d->ToJson().dump();
}

// The same replacement after an idle gap past the TTL is an expiry, not a prompt change.
TEST(ThreadTrackerTest, AnExpiredCacheIsExpiredEvenWhenTheLastMessageChanged) {
  ThreadTracker tracker;
  json first = Body(kSystem, 1);
  first["messages"][1]["content"] = std::string(600, 'p');
  ASSERT_FALSE(tracker.Diagnose(Turn(0, 0, 2000), Fp(first), kOpenAI));
  json replaced = Body(kSystem, 1);
  replaced["messages"][1]["content"] = "another question";
  auto d = tracker.Diagnose(Turn(400, 0, 1800), Fp(replaced), kOpenAI);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->cause, "expired") << d->ToJson().dump();
  EXPECT_GE(d->expected_cached, 1024);
}

TEST(ThreadTrackerTest, AnEditedHistoryIsAPromptChangeThatSaysWhatItCost) {
  ThreadTracker tracker;
  ASSERT_FALSE(tracker.Diagnose(Turn(0, 0, 2000), Fp(Body(kSystem, 3)), kOpenAI));
  json edited = Body(kSystem, 4);
  edited["messages"][2]["content"] = "a different earlier answer";
  // Reads cover the shared prefix (the system prompt and the first question).
  auto d = tracker.Diagnose(Turn(20, 1920, 300), Fp(edited), kOpenAI);
  EXPECT_FALSE(d.has_value()) << "reads were all the shared prefix allowed: "
                              << d->ToJson().dump();
  // With a system prompt edit, the shared prefix is nearly nothing.
  json system_edit = Body("EDITED " + kSystem, 5);
  d = tracker.Diagnose(Turn(40, 0, 2400), Fp(system_edit), kOpenAI);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->cause, "prompt_changed");
  EXPECT_EQ(d->message_index, 0);
  EXPECT_GT(d->ToJson()["lost_tokens"].get<int64_t>(), 1000);
}

TEST(ThreadTrackerTest, RoutedAwayNamesTheRouterAndItsReason) {
  ThreadTracker tracker;
  RequestRecord first = Turn(0, 0, 2000);
  first.model = "kvgate-router";
  first.target = "sonnet";
  first.provider = "claude";
  ASSERT_FALSE(tracker.Diagnose(first, Fp(Body(kSystem, 1)), kOpenAI));
  RequestRecord moved = Turn(20, 0, 2100);
  moved.model = "kvgate-router";
  moved.target = "gpt-4o-mini";
  auto d = tracker.Diagnose(moved, Fp(Body(kSystem, 2)), kOpenAI,
                            TurnContext{.router = "kvgate-router",
                                        .route_reason = "moved to gpt-4o-mini: cheaper"});
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->cause, "routed_away");
  json j = d->ToJson();
  EXPECT_EQ(j["router"], "kvgate-router");
  EXPECT_EQ(j["previous_model"], "sonnet");
  EXPECT_NE(j["detail"].get<std::string>().find("cheaper"), std::string::npos) << j.dump();
  // The same move without a router is a plain model switch.
  RequestRecord back = Turn(40, 0, 2200);
  back.target = "sonnet";
  back.provider = "claude";
  d = tracker.Diagnose(back, Fp(Body(kSystem, 3)), kOpenAI);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->cause, "model_switch");
}

TEST(ThreadTrackerTest, AnEngineThatRestartedIsNamed) {
  CacheRules engine{.min_tokens = 16, .granularity = 16, .ttl_seconds = std::nullopt};
  ThreadTracker tracker;
  RequestRecord first = Turn(0, 0, 2000);
  first.system_fingerprint = "kvgate-engine-a";
  ASSERT_FALSE(tracker.Diagnose(first, Fp(Body(kSystem, 1)), engine));
  RequestRecord after = Turn(50, 0, 2100);
  after.system_fingerprint = "kvgate-engine-b";
  auto d = tracker.Diagnose(after, Fp(Body(kSystem, 2)), engine);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->cause, "engine_restarted");
  // Same instance, same loss: the engine evicted it.
  RequestRecord again = Turn(60, 0, 2200);
  again.system_fingerprint = "kvgate-engine-b";
  d = tracker.Diagnose(again, Fp(Body(kSystem, 3)), engine);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->cause, "partial_eviction");
}

TEST(ThreadTrackerTest, TheViewKeepsEachTargetsLastTurnAndTheThreadsHabits) {
  ThreadTracker tracker;
  auto turn = [](int64_t at, const char* target, int64_t input) {
    RequestRecord r = Turn(at, 0, input);
    r.target = target;
    return r;
  };
  tracker.Diagnose(turn(0, "a", 1000), Fp(Body(kSystem, 1)), kOpenAI);
  tracker.Diagnose(turn(10, "b", 1200), Fp(Body(kSystem, 2)), kOpenAI);
  tracker.Diagnose(turn(30, "a", 1400), Fp(Body(kSystem, 3)), kOpenAI);
  ThreadView view = tracker.View("thr_1");
  EXPECT_EQ(view.turns, 3);
  ASSERT_TRUE(view.latest.has_value());
  EXPECT_EQ(view.latest->target, "a");
  ASSERT_EQ(view.by_target.size(), 2u);
  EXPECT_EQ(view.by_target[0].target, "a");
  EXPECT_EQ(view.by_target[0].created_at_us, kT0 + 30'000'000);
  ASSERT_NE(view.OnTarget("b"), nullptr);
  EXPECT_EQ(*view.OnTarget("b")->total_input, 1200);
  EXPECT_EQ(view.OnTarget("c"), nullptr);
  EXPECT_NEAR(view.mean_growth_tokens, 200, 1e-9);
  EXPECT_NEAR(view.mean_output_tokens, 50, 1e-9);
  EXPECT_GT(view.mean_gap_seconds, 10);
  EXPECT_FALSE(tracker.View("nobody").latest.has_value());
}

TEST(ExpectCachedTest, SharedPrefixLimitsAndTtlExpires) {
  TurnSummary last;
  last.target = "m";
  last.created_at_us = kT0;
  last.fingerprint = Fp(Body(kSystem, 2));
  last.total_input = 2000;
  last.cache_read = 0;
  last.cache_write = 0;
  // Intact prefix: the whole previous prompt, in 128-token steps.
  auto e = ExpectCached(last, Fingerprint(Body(kSystem, 3)), 2300, kOpenAI, kT0 + 60'000'000);
  ASSERT_TRUE(e.has_value());
  EXPECT_TRUE(e->comparison.previous_intact);
  EXPECT_EQ(e->tokens, 1920);
  EXPECT_FALSE(e->expired);
  EXPECT_EQ(e->Live(), 1920);
  // Past the TTL the same prefix is expected gone.
  e = ExpectCached(last, Fingerprint(Body(kSystem, 3)), 2300, kOpenAI, kT0 + 301'000'000);
  EXPECT_TRUE(e->expired);
  EXPECT_EQ(e->Live(), 0);
  // Breakpoint caching gives back only what was read or written.
  last.cache_write = 1500;
  e = ExpectCached(last, Fingerprint(Body(kSystem, 3)), 2300, kAnthropic, kT0 + 1'000'000);
  EXPECT_EQ(e->tokens, 1500);
  // A long-TTL write keeps it past five minutes.
  last.wrote_1h = true;
  e = ExpectCached(last, Fingerprint(Body(kSystem, 3)), 2300, kAnthropic, kT0 + 600'000'000);
  EXPECT_FALSE(e->expired);
  EXPECT_EQ(e->ttl_seconds, 3600);
  // Unknown size of the last prompt: no expectation.
  last.total_input.reset();
  EXPECT_FALSE(ExpectCached(last, Fingerprint(Body(kSystem, 3)), 2300, kOpenAI, kT0));
}

TEST(ThreadTrackerTest, ConcurrentThreadsAreSafe) {
  ThreadTracker tracker({.max_threads = 64, .shards = 4});
  const auto fp = Fp(Body(kSystem, 1));
  std::vector<std::thread> workers;
  std::atomic<int> diagnosed{0};
  for (int w = 0; w < 4; ++w) {
    workers.emplace_back([&, w] {
      for (int i = 0; i < 500; ++i) {
        RequestRecord r = Turn(i * 400, 0, 2000);
        r.thread_id = "t" + std::to_string(w * 1000 + i % 10);
        if (tracker.Diagnose(r, fp, kOpenAI)) diagnosed.fetch_add(1);
      }
    });
  }
  for (auto& t : workers) t.join();
  // Each of the 40 threads: a first turn, then 49 expired turns.
  EXPECT_EQ(diagnosed.load(), 4 * 490);
  EXPECT_EQ(tracker.Size(), 40u);
}

// The provider's own reason against kvgate's diagnosis: structure the provider can see must
// match; causes it cannot see (expiry, eviction) agree with its "none"; a reason that says it did
// not compare is not counted either way.
TEST(ProviderDiagnosisTest, AgreesOnlyWhereBothCanSee) {
  const nlohmann::json none = nullptr;
  const nlohmann::json expired = {{"cause", "expired"}};
  const nlohmann::json switched = {{"cause", "model_switch"}};
  const nlohmann::json tools = {{"cause", "prompt_changed"}, {"element", "tools"}};
  const nlohmann::json system_msg = {{"cause", "prompt_changed"}, {"element", "message"},
                                     {"message_index", 0}, {"system_message", true}};
  const nlohmann::json user_msg = {{"cause", "prompt_changed"}, {"element", "message"},
                                   {"message_index", 3}};
  EXPECT_EQ(ProviderDiagnosisAgrees(none, "none"), true);
  EXPECT_EQ(ProviderDiagnosisAgrees(expired, "none"), true);
  EXPECT_EQ(ProviderDiagnosisAgrees(tools, "none"), false);
  EXPECT_EQ(ProviderDiagnosisAgrees(switched, "model_changed"), true);
  EXPECT_EQ(ProviderDiagnosisAgrees(expired, "model_changed"), false);
  EXPECT_EQ(ProviderDiagnosisAgrees(tools, "tools_changed"), true);
  EXPECT_EQ(ProviderDiagnosisAgrees(tools, "system_changed"), false);
  EXPECT_EQ(ProviderDiagnosisAgrees(system_msg, "system_changed"), true);
  EXPECT_EQ(ProviderDiagnosisAgrees(system_msg, "messages_changed"), false);
  EXPECT_EQ(ProviderDiagnosisAgrees(user_msg, "messages_changed"), true);
  EXPECT_EQ(ProviderDiagnosisAgrees(none, "messages_changed"), false);
  for (const char* unknown : {"previous_message_not_found", "unavailable", "unrecognized", ""}) {
    EXPECT_EQ(ProviderDiagnosisAgrees(tools, unknown), std::nullopt) << unknown;
  }
}

// A chat body's system and developer messages are marked in the fingerprint, and the mark
// survives the stored form, so a restarted gateway still says which message changed.
TEST(ProviderDiagnosisTest, SystemMessagesAreMarkedInTheFingerprint) {
  const PromptFingerprint fp = Fingerprint(json::parse(
      R"({"messages":[{"role":"system","content":"a"},{"role":"developer","content":"b"},)"
      R"({"role":"user","content":"c"}]})"));
  ASSERT_EQ(fp.elements.size(), 3u);
  EXPECT_TRUE(fp.elements[0].system_role);
  EXPECT_TRUE(fp.elements[1].system_role);
  EXPECT_FALSE(fp.elements[2].system_role);
  auto back = FromJson(nlohmann::json::parse(ToJsonText(fp)));
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(*back, fp);
}

}  // namespace
}  // namespace kvgate::telemetry

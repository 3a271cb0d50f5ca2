// What a prompt_changed diagnosis shows: the changed element's role and number, the text around
// the change (bounded, redacted, whole characters), and a prefix that changes on every turn.
#include <gtest/gtest.h>

#include "common/utf8.h"
#include "telemetry/diagnosis.h"
#include "telemetry/prompt_excerpt.h"

namespace kvgate::telemetry {
namespace {

using nlohmann::json;

constexpr CacheRules kOpenAI{.min_tokens = 1024, .granularity = 128, .ttl_seconds = 300};
constexpr int64_t kT0 = 1'767'225'600'000'000;

// A thread's turns as a client sends them: the body's bytes, fingerprinted and kept as text the
// way the gateway does it.
class Thread {
 public:
  explicit Thread(ThreadTracker& tracker, SecretRedactor redactor = {}, bool keep_text = true)
      : tracker_(tracker), redactor_(std::move(redactor)), keep_text_(keep_text) {}

  // Sends `body` as the next turn (20 s after the previous one): 0 cache reads of a prompt of
  // 2000 + 100 * turn tokens, as when the prompt changed near its start. `missed` is what the
  // turn's miss costs (pico-USD).
  std::optional<Diagnosis> Send(const json& body, int64_t missed = 0) {
    const std::string text = body.dump();
    const raw_json::Object object(raw_json::Parse(text).value());
    RequestRecord r;
    r.thread_id = "thr_x";
    r.model = "gpt-4o";
    r.provider = "openai";
    r.created_at_us = kT0 + turn_ * 20'000'000;
    r.usage.cache_read = 0;
    r.usage.cache_write_5m = 0;
    r.usage.cache_write_1h = 0;
    r.usage.cache_write_no_ttl = 0;
    r.usage.uncached = 2000 + 100 * turn_;
    r.usage.output = 50;
    ++turn_;
    TurnContext context;
    if (keep_text_) {
      context.texts = std::make_shared<const PromptTexts>(CapturePromptTexts(object, redactor_));
    }
    context.missed_cost = [missed](const Diagnosis&) { return missed; };
    return tracker_.Diagnose(r, std::make_shared<const PromptFingerprint>(Fingerprint(object)),
                             kOpenAI, context);
  }

 private:
  ThreadTracker& tracker_;
  SecretRedactor redactor_;
  bool keep_text_;
  int turn_ = 0;
};

// A chat: the system prompt, then `user_turns` questions and answers, then a long new question.
// The turns' usage says 2000+ tokens while most of the bytes follow any change a test makes, so
// what the previous turn had cached is lost and the diagnosis is prompt_changed.
json Chat(const std::string& system, int user_turns) {
  json messages = json::array({{{"role", "system"}, {"content", system}}});
  for (int i = 0; i < user_turns; ++i) {
    messages.push_back({{"role", "user"}, {"content", "question " + std::to_string(i)}});
    messages.push_back({{"role", "assistant"}, {"content", "answer " + std::to_string(i)}});
  }
  messages.push_back(
      {{"role", "user"}, {"content", "the newest question " + std::string(600, 'q')}});
  return {{"model", "gpt-4o"}, {"messages", messages}};
}

// A system prompt of `length` characters with `stamp` `at` characters in.
json Body(const std::string& stamp, int user_turns, size_t at = 200, size_t length = 3000) {
  std::string system(at, 's');
  system += stamp;
  system.resize(std::max(length, system.size()), 't');
  return Chat(system, user_turns);
}

// Where a stamp's seconds sit in the system message's minified JSON: after
// {"content":" (12 bytes: the test client sorts keys), `at` characters and "Current time:
// 2026-01-01T10:00:0".
constexpr uint64_t StampOffset(uint64_t at) { return 12 + at + 32; }

std::string Stamp(int second) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "Current time: 2026-01-01T10:00:%02dZ.", second);
  return buf;
}

TEST(ExcerptTest, SystemMessageNamedByRoleNumberAndText) {
  ThreadTracker tracker;
  Thread thread(tracker);
  ASSERT_FALSE(thread.Send(Body(Stamp(1), 1)));
  auto d = thread.Send(Body(Stamp(2), 2));
  ASSERT_TRUE(d.has_value());
  ASSERT_EQ(d->cause, "prompt_changed");
  const json j = d->ToJson();
  EXPECT_EQ(j["role"], "system");
  EXPECT_EQ(j["message_number"], 1);
  EXPECT_EQ(j["message_index"], 0);
  const std::string before = j["excerpt"]["before"], after = j["excerpt"]["after"];
  EXPECT_NE(before.find("10:00:01Z"), std::string::npos) << before;
  EXPECT_NE(after.find("10:00:02Z"), std::string::npos) << after;
  EXPECT_EQ(before.find("10:00:02Z"), std::string::npos) << before;
  EXPECT_FALSE(j["excerpt"].contains("beyond_kept"));
  // About 60 characters either side of the change, not the whole element.
  EXPECT_LE(before.size(), 2 * kExcerptChars);
  EXPECT_GE(before.size(), 2 * kExcerptChars - 2);
  const std::string detail = j["detail"];
  EXPECT_EQ(j["char_offset"], StampOffset(200) / 64 * 64);
  EXPECT_NE(detail.find("the system prompt (message 1) changed at character 192"),
            std::string::npos)
      << detail;
  EXPECT_FALSE(j.contains("volatile"));
}

TEST(ExcerptTest, UserMessageToolsAndTopLevelSystemAreNamed) {
  {
    ThreadTracker tracker;
    Thread thread(tracker);
    json a = Chat("short", 2), b = Chat("short", 3);
    a["messages"][3]["content"] = "question 1, as first asked";
    ASSERT_FALSE(thread.Send(a));
    auto d = thread.Send(b);
    ASSERT_TRUE(d.has_value());
    ASSERT_EQ(d->cause, "prompt_changed");
    const json j = d->ToJson();
    EXPECT_EQ(j["role"], "user");
    EXPECT_EQ(j["message_number"], 4);
    EXPECT_NE(j["detail"].get<std::string>().find("message 4 (user) changed"), std::string::npos)
        << j.dump();
    EXPECT_NE(j["excerpt"]["before"].get<std::string>().find("as first asked"), std::string::npos);
  }
  {
    ThreadTracker tracker;
    Thread thread(tracker);
    json a = Body("", 1), b = Body("", 2);
    a["tools"] = json::array({{{"type", "function"}, {"function", {{"name", "search"}}}}});
    b["tools"] = json::array({{{"type", "function"}, {"function", {{"name", "lookup"}}}}});
    ASSERT_FALSE(thread.Send(a));
    const json j = thread.Send(b).value().ToJson();
    EXPECT_EQ(j["role"], "tools");
    EXPECT_FALSE(j.contains("message_number"));
    EXPECT_NE(j["excerpt"]["before"].get<std::string>().find("search"), std::string::npos);
    EXPECT_NE(j["excerpt"]["after"].get<std::string>().find("lookup"), std::string::npos);
    EXPECT_EQ(j["detail"].get<std::string>().rfind("the tools changed at character", 0), 0u);
  }
  {
    ThreadTracker tracker;
    Thread thread(tracker);
    auto anthropic = [](const std::string& stamp, int turns) {
      json body = Body(stamp, turns);
      body["system"] = body["messages"][0]["content"];
      body["messages"].erase(0);
      return body;
    };
    ASSERT_FALSE(thread.Send(anthropic(Stamp(1), 1)));
    const json j = thread.Send(anthropic(Stamp(2), 2)).value().ToJson();
    EXPECT_EQ(j["role"], "system");
    EXPECT_FALSE(j.contains("message_number"));
    EXPECT_EQ(j["detail"].get<std::string>().rfind("the system prompt changed at character", 0), 0u)
        << j.dump();
  }
}

TEST(ExcerptTest, SecretsAreRedactedBeforeTheyAreKept) {
  const std::string provider_key = "prov-key-0123456789abcdef";
  ThreadTracker tracker;
  Thread thread(tracker, SecretRedactor({provider_key}));
  auto body = [&](int second) {
    return Body("key " + provider_key + " and Authorization: Bearer abcDEF0123456789xyz, " +
                    "sk-proj-AAAAbbbbCCCCdddd1234 " + Stamp(second),
                1 + second);
  };
  ASSERT_FALSE(thread.Send(body(1)));
  const json j = thread.Send(body(2)).value().ToJson();
  const std::string shown = j["excerpt"].dump();
  EXPECT_EQ(shown.find(provider_key), std::string::npos) << shown;
  EXPECT_EQ(shown.find("abcDEF0123456789xyz"), std::string::npos) << shown;
  EXPECT_EQ(shown.find("AAAAbbbbCCCCdddd"), std::string::npos) << shown;
  EXPECT_NE(shown.find(std::string(SecretRedactor::kMarker)), std::string::npos) << shown;
  EXPECT_NE(shown.find("10:00:02Z"), std::string::npos) << shown;

  std::string text = "ordinary words: sk-short, skeleton-key-holder, Bearer of news";
  const std::string unchanged = text;
  RedactPromptText(text, SecretRedactor());
  EXPECT_EQ(text, unchanged);  // too short or not a token: left alone
}

TEST(ExcerptTest, WindowsNeverCutAMultiByteCharacter) {
  // 3-byte characters around the change, and a change inside a character ("é" -> "è" share
  // their first byte).
  std::string wide;
  for (int i = 0; i < 100; ++i) wide += "日本";
  ThreadTracker tracker;
  Thread thread(tracker);
  ASSERT_FALSE(thread.Send(Body(wide + "café" + wide, 1)));
  const json j = thread.Send(Body(wide + "cafè" + wide, 2)).value().ToJson();
  const std::string before = j["excerpt"]["before"], after = j["excerpt"]["after"];
  EXPECT_TRUE(IsValidUtf8(before));
  EXPECT_TRUE(IsValidUtf8(after));
  EXPECT_NE(before.find("café"), std::string::npos) << before;
  EXPECT_NE(after.find("cafè"), std::string::npos) << after;
  // 60 characters either side: of "日本" 3 bytes each, so well past 60 bytes.
  EXPECT_GT(before.size(), 150u);
  EXPECT_LE(before.size(), 2 * kExcerptChars * 3 + 4);

  // The kept text of an element cut by the bound ends on a whole character.
  const std::string big =
      json({{"messages", {{{"role", "user"}, {"content", wide + wide}}}}}).dump();
  const PromptTexts texts =
      CapturePromptTexts(raw_json::Object(raw_json::Parse(big).value()), SecretRedactor(),
                         PromptTextBounds{.element_bytes = 100, .total_bytes = 1000});
  ASSERT_EQ(texts.elements.size(), 1u);
  EXPECT_FALSE(texts.elements[0].complete);
  // (Kept with the redaction margin; an excerpt shows at most the bound, once redacted.)
  EXPECT_LE(texts.elements[0].text.size(), 100u + kRedactionMargin);
  EXPECT_GE(texts.elements[0].text.size(), 98u + kRedactionMargin);
  EXPECT_TRUE(IsValidUtf8(texts.elements[0].text));
}

TEST(ExcerptTest, TextIsBoundedAndAChangePastItHasNoBefore) {
  json body = Body("", 3);
  body["tools"] = json::array({{{"name", std::string(10'000, 'x')}}});
  const std::string bytes = body.dump();
  const PromptTexts texts =
      CapturePromptTexts(raw_json::Object(raw_json::Parse(bytes).value()), SecretRedactor());
  const PromptTextBounds bounds;
  ASSERT_GE(texts.elements.size(), 4u);
  EXPECT_EQ(texts.elements[0].text.size(), bounds.element_bytes + kRedactionMargin);  // cut
  EXPECT_FALSE(texts.elements[0].complete);
  EXPECT_LE(texts.Bytes(), bounds.total_bytes);
  EXPECT_TRUE(texts.elements.back().complete);

  // A timestamp at character 5,000 of a 6,000-character system prompt: past the 4 KB kept.
  ThreadTracker tracker;
  Thread thread(tracker);
  ASSERT_FALSE(thread.Send(Body(Stamp(1), 1, 5000, 20'000)));
  const json j = thread.Send(Body(Stamp(2), 2, 5000, 20'000)).value().ToJson();
  ASSERT_EQ(j["cause"], "prompt_changed");
  EXPECT_EQ(j["char_offset"], StampOffset(5000) / 64 * 64) << j.dump();
  EXPECT_FALSE(j["excerpt"].contains("before")) << j.dump();
  EXPECT_FALSE(j["excerpt"].contains("after")) << j.dump();
  EXPECT_EQ(j["excerpt"]["beyond_kept"], true);
  EXPECT_NE(j["detail"].get<std::string>().find("not kept"), std::string::npos) << j.dump();
}

TEST(ExcerptTest, ExcerptsOffKeepNoText) {
  ThreadTracker tracker;
  Thread thread(tracker, SecretRedactor(), /*keep_text=*/false);
  ASSERT_FALSE(thread.Send(Body(Stamp(1), 1)));
  const json j = thread.Send(Body(Stamp(2), 2)).value().ToJson();
  EXPECT_EQ(j["cause"], "prompt_changed");
  EXPECT_EQ(j["role"], "system");
  EXPECT_FALSE(j.contains("excerpt")) << j.dump();
  EXPECT_EQ(j.dump().find("10:00:0"), std::string::npos) << j.dump();
}

TEST(VolatilePrefixTest, TheSamePlaceChangingThreeTurnsInARowIsVolatile) {
  ThreadTracker tracker;
  Thread thread(tracker);
  ASSERT_FALSE(thread.Send(Body(Stamp(0), 1), 1'000'000));
  std::vector<json> seen;
  for (int turn = 1; turn <= 4; ++turn) {
    auto d = thread.Send(Body(Stamp(turn), turn + 1), 1'000'000'000LL * turn);  // $0.001 * turn
    ASSERT_TRUE(d.has_value());
    seen.push_back(d->ToJson());
  }
  EXPECT_FALSE(seen[0].contains("volatile"));
  EXPECT_FALSE(seen[1].contains("volatile"));
  for (int i : {2, 3}) {
    ASSERT_EQ(seen[i]["volatile"], true) << seen[i].dump();
    EXPECT_EQ(seen[i]["turns_changed"], i + 1);
  }
  // The sum over the turns of the run: $0.001 + $0.002 + $0.003 + $0.004.
  EXPECT_NEAR(seen[3]["lost_usd"].get<double>(), 0.010, 1e-12);
  const std::string detail = seen[3]["detail"];
  EXPECT_NE(detail.find("the system prompt (message 1) changes at character 192 on every turn"),
            std::string::npos)
      << detail;
  EXPECT_NE(detail.find("$0.0100 lost over 4 turns"), std::string::npos) << detail;
  EXPECT_NE(detail.find("move it after the cached part"), std::string::npos) << detail;
  EXPECT_EQ(seen[3]["role"], "system");
  EXPECT_EQ(seen[3]["message_number"], 1);

  // An unchanged turn ends the run; the next change starts a new one.
  json same = Body(Stamp(4), 6);
  thread.Send(same);
  auto d = thread.Send(Body(Stamp(9), 7));
  ASSERT_TRUE(d.has_value());
  EXPECT_FALSE(d->ToJson().contains("volatile"));
}

TEST(VolatilePrefixTest, AChangeThatMovesAroundIsNotVolatile) {
  ThreadTracker tracker;
  Thread thread(tracker);
  std::string system(3000, 's');
  ASSERT_FALSE(thread.Send(Chat(system, 1)));
  const size_t places[] = {900, 200, 1500, 600};
  for (int turn = 1; turn <= 4; ++turn) {
    // Each turn edits another place: it differs from the previous turn there.
    system[places[turn - 1]] = '!';
    auto d = thread.Send(Chat(system, turn + 1));
    ASSERT_TRUE(d.has_value());
    EXPECT_EQ(d->cause, "prompt_changed");
    EXPECT_FALSE(d->ToJson().contains("volatile")) << d->ToJson().dump();
  }
}

}  // namespace
}  // namespace kvgate::telemetry

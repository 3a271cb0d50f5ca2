// The vocabulary trie: the tokens it allows are exactly those whose bytes the matcher accepts
// (checked token by token), on a small vocabulary and on the real model's.
#include "local_engine/token_trie.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "local_engine/gguf.h"

namespace kvgate::engine {
namespace {

using nlohmann::json;

const std::string kModel = std::string(KVGATE_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";

TokenBitmask BruteForce(JsonMatcher& m, const std::vector<std::string>& vocab) {
  TokenBitmask out;
  out.Reset(vocab.size());
  for (size_t i = 0; i < vocab.size(); ++i) {
    if (vocab[i].empty()) continue;
    const size_t mark = m.Mark();
    if (m.AdvanceBytes(vocab[i])) out.Set(i);
    m.Rollback(mark);
  }
  return out;
}

void ExpectSameMasks(const TokenBitmask& a, const TokenBitmask& b, const std::vector<std::string>& vocab) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a.Test(i), b.Test(i)) << "token " << i << " '" << vocab[i] << "'";
  }
}

TEST(TokenTrie, SmallVocabulary) {
  const std::vector<std::string> vocab = {"{", "{\"", "\"", "a", "ab", "\":", ":", "1", "12", "}",
                                          " ", "  ", "   ", "", "\"}", "true", "tr", "{}", "ab"};
  auto trie = TokenTrie::Build(vocab);
  EXPECT_EQ(trie->vocab_size(), vocab.size());
  auto g = JsonObjectGrammar();
  JsonMatcher m(g);
  TokenBitmask got;
  trie->AllowedTokens(m, got);
  // At the start: "{", "{\"", " ", "  ", "{}" (and nothing else).
  std::vector<size_t> allowed;
  for (size_t i = 0; i < vocab.size(); ++i) {
    if (got.Test(i)) allowed.push_back(i);
  }
  EXPECT_EQ(allowed, (std::vector<size_t>{0, 1, 10, 11, 17}));
  for (std::string_view step : {"{", "\"", "ab", "\":", "1"}) {
    ASSERT_TRUE(m.AdvanceBytes(step));
    m.Commit();
    trie->AllowedTokens(m, got);
    ExpectSameMasks(got, BruteForce(m, vocab), vocab);
  }
  EXPECT_EQ(m.depth(), 3);  // the walks left the state alone
}

TEST(TokenTrie, RealVocabularyMatchesBruteForce) {
  if (!std::filesystem::exists(kModel)) GTEST_SKIP() << "model not fetched: " << kModel;
  auto file = GgufFile::Open(kModel);
  ASSERT_TRUE(file.has_value());
  auto tok = Tokenizer::FromGguf(**file);
  ASSERT_TRUE(tok.has_value());
  auto trie = TokenTrie::FromTokenizer(**tok);
  std::vector<std::string> vocab((*tok)->vocab_size());
  for (size_t i = 0; i < vocab.size(); ++i) {
    if ((*tok)->GetTokenType(static_cast<int32_t>(i)) != TokenType::kControl) {
      vocab[i] = (*tok)->TokenBytes(static_cast<int32_t>(i));
    }
  }
  auto g = CompileJsonSchema(json::parse(R"({"type":"object","properties":{
      "name":{"type":"string","maxLength":7},"age":{"type":"integer"},"tags":{"type":"array","items":{"enum":["a","b"]}}},
      "required":["name","age","tags"],"additionalProperties":false})"), "s");
  ASSERT_TRUE(g.has_value());
  JsonMatcher m(*g);
  EXPECT_GT(trie->num_plain_tokens(), vocab.size() / 2);
  // Walk a valid output token by token (greedy tokenization of the text) and compare each step.
  const std::string text = "{\"age\": 41, \"name\": \"Zo\xc3\xab \\\"Q\\\"\", \"tags\": [\"a\",\"b\"]}";
  const std::vector<int32_t> ids = (*tok)->Encode(text, false);
  TokenBitmask got;
  for (int32_t id : ids) {
    trie->AllowedTokens(m, got);
    ExpectSameMasks(got, BruteForce(m, vocab), vocab);
    EXPECT_TRUE(got.Test(static_cast<size_t>(id))) << "token '" << vocab[id] << "' of the text";
    ASSERT_TRUE(m.AdvanceBytes(vocab[id]));
    m.Commit();
  }
  EXPECT_TRUE(m.IsComplete());
  trie->AllowedTokens(m, got);
  EXPECT_EQ(got.Count(), 0u);  // complete: only end-of-generation may follow
}

}  // namespace
}  // namespace kvgate::engine

#include "local_engine/tokenizer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "tests/engine_io/gguf_builder.h"

namespace kvgate::engine {
namespace {

std::string ModelPath() {
  return std::string(KVGATE_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

// Loaded once per test (no global state); the real model's tokenizer.
struct Loaded {
  std::unique_ptr<GgufFile> file;
  std::unique_ptr<Tokenizer> tok;
};
std::optional<Loaded> LoadModel() {
  if (!std::filesystem::exists(ModelPath())) return std::nullopt;
  auto f = GgufFile::Open(ModelPath());
  if (!f) return std::nullopt;
  auto t = Tokenizer::FromGguf(**f);
  if (!t) {
    ADD_FAILURE() << t.error().message;
    return std::nullopt;
  }
  return Loaded{std::move(*f), std::move(*t)};
}

#define REQUIRE_MODEL(var) \
  auto var = LoadModel();  \
  if (!var) GTEST_SKIP() << "model not fetched: " << ModelPath();

// GPT-2's byte -> code point table, written out independently of the tokenizer's copy.
std::string ByteSymbol(int b) {
  int cp = b;
  if (!((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255))) {
    int n = 0;
    for (int x = 0; x < b; ++x) {
      if (!((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174 && x <= 255))) ++n;
    }
    cp = 256 + n;
  }
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

// A toy vocabulary: the 256 byte symbols, then merged tokens, then one control token.
TokenizerSpec ToySpec(PreTokenizer pre) {
  TokenizerSpec spec;
  for (int b = 0; b < 256; ++b) spec.tokens.push_back(ByteSymbol(b));
  spec.merges = {"a a", "b c", "aa a", "Ġ a", "Ġa b"};
  for (const char* t : {"aa", "bc", "aaa", "Ġa", "Ġab"}) spec.tokens.push_back(t);
  spec.tokens.push_back("<ctl>");
  spec.token_types.assign(spec.tokens.size(), 1);
  spec.token_types.back() = 3;
  spec.pre = pre;
  return spec;
}

std::vector<std::string> Pieces(const Tokenizer& t, std::string_view text) {
  std::vector<std::string> out;
  for (auto p : t.PreTokenize(text)) out.emplace_back(p);
  return out;
}

using Strs = std::vector<std::string>;

TEST(TokenizerTest, MergesByRankLeftmostFirst) {
  auto t = Tokenizer::FromSpec(ToySpec(PreTokenizer::kGpt2));
  ASSERT_TRUE(t.has_value()) << t.error().message;
  const Tokenizer& tok = **t;
  const int32_t aa = 256, bc = 257, aaa = 258, sp_a = 259, sp_ab = 260;
  EXPECT_EQ(tok.Encode("aa", false), (std::vector<int32_t>{aa}));
  // "a a" (rank 0) applies leftmost first; then "aa a" (rank 2).
  EXPECT_EQ(tok.Encode("aaa", false), (std::vector<int32_t>{aaa}));
  EXPECT_EQ(tok.Encode("aaaa", false), (std::vector<int32_t>{aa, aa}));
  EXPECT_EQ(tok.Encode("aaaaa", false), (std::vector<int32_t>{aa, aaa}));
  EXPECT_EQ(tok.Encode("abc", false), (std::vector<int32_t>{'a', bc}));
  // "b c" (rank 1) wins over "Ġ a" (rank 3), which leaves "Ġa b" (rank 4) nothing to merge.
  EXPECT_EQ(tok.Encode(" abc", false), (std::vector<int32_t>{sp_a, bc}));
  EXPECT_EQ(tok.Encode(" ab", false), (std::vector<int32_t>{sp_ab}));
  EXPECT_EQ(tok.Encode(" a", false), (std::vector<int32_t>{sp_a}));
  EXPECT_EQ(tok.Decode(std::vector<int32_t>{sp_ab, 'c'}), " abc");
}

TEST(TokenizerTest, ControlTokensOnlyWithParseSpecial) {
  auto t = Tokenizer::FromSpec(ToySpec(PreTokenizer::kGpt2));
  ASSERT_TRUE(t.has_value());
  const int32_t ctl = 261;
  EXPECT_EQ((*t)->Encode("x<ctl>y", true), (std::vector<int32_t>{'x', ctl, 'y'}));
  const auto plain = (*t)->Encode("x<ctl>y", false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), ctl), 0);
  EXPECT_EQ((*t)->Decode(plain), "x<ctl>y");
  EXPECT_EQ((*t)->Decode(std::vector<int32_t>{'x', ctl}), "x<ctl>");
  EXPECT_EQ((*t)->Decode(std::vector<int32_t>{'x', ctl}, /*render_special=*/false), "x");
  EXPECT_EQ((*t)->Decode(std::vector<int32_t>{-1, 'x', 99999}), "x");
}

TEST(TokenizerTest, Gpt2PreTokenizer) {
  auto t = Tokenizer::FromSpec(ToySpec(PreTokenizer::kGpt2));
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(Pieces(**t, "Hello world"), (Strs{"Hello", " world"}));
  EXPECT_EQ(Pieces(**t, "I'm they're it's"), (Strs{"I", "'m", " they", "'re", " it", "'s"}));
  EXPECT_EQ(Pieces(**t, "IT'S"), (Strs{"IT", "'", "S"}));  // contractions are case-sensitive
  EXPECT_EQ(Pieces(**t, "a  b"), (Strs{"a", " ", " b"}));
  EXPECT_EQ(Pieces(**t, "a   "), (Strs{"a", "   "}));
  EXPECT_EQ(Pieces(**t, "x\n\ny"), (Strs{"x", "\n", "\n", "y"}));
  EXPECT_EQ(Pieces(**t, "a\tb"), (Strs{"a", "\t", "b"}));
  EXPECT_EQ(Pieces(**t, "year 2024!!"), (Strs{"year", " 2024", "!!"}));
  EXPECT_EQ(Pieces(**t, "x = (1+2)"), (Strs{"x", " =", " (", "1", "+", "2", ")"}));
  EXPECT_EQ(Pieces(**t, "café 你好"), (Strs{"café", " 你好"}));
  EXPECT_EQ(Pieces(**t, "e\xcc\x81"), (Strs{"e", "\xcc\x81"}));  // a combining mark is not \p{L}
  EXPECT_EQ(Pieces(**t, "\xff\xfe ok"), (Strs{"\xff\xfe", " ok"}));  // invalid bytes survive
  EXPECT_TRUE(Pieces(**t, "").empty());
}

TEST(TokenizerTest, SmollmSplitsEveryDigit) {
  auto t = Tokenizer::FromSpec(ToySpec(PreTokenizer::kSmollm));
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(Pieces(**t, "year 2024!!"), (Strs{"year", " ", "2", "0", "2", "4", "!!"}));
  EXPECT_EQ(Pieces(**t, "a  1"), (Strs{"a", "  ", "1"}));  // lookahead stops at the digit chunk
  EXPECT_EQ(Pieces(**t, "x½²٣"), (Strs{"x", "½", "²", "٣"}));
  EXPECT_EQ(Pieces(**t, "I'm 12"), (Strs{"I", "'m", " ", "1", "2"}));
}

TEST(TokenizerTest, RejectsBadSpecs) {
  TokenizerSpec empty;
  EXPECT_EQ(Tokenizer::FromSpec(empty).error().code, ErrorCode::kCorruptData);
  auto spec = ToySpec(PreTokenizer::kGpt2);
  spec.token_types.pop_back();
  EXPECT_EQ(Tokenizer::FromSpec(spec).error().code, ErrorCode::kCorruptData);
  spec = ToySpec(PreTokenizer::kGpt2);
  spec.tokens['A'] = "notA";  // printable ASCII must have its byte symbol
  EXPECT_EQ(Tokenizer::FromSpec(spec).error().code, ErrorCode::kCorruptData);
  spec = ToySpec(PreTokenizer::kGpt2);
  spec.eos_id = 100000;
  EXPECT_EQ(Tokenizer::FromSpec(spec).error().code, ErrorCode::kCorruptData);
  spec = ToySpec(PreTokenizer::kGpt2);
  spec.merges.push_back("nospace");
  EXPECT_EQ(Tokenizer::FromSpec(spec).error().code, ErrorCode::kCorruptData);
}

TEST(TokenizerTest, FromGgufRejectsUnsupportedModels) {
  testing::GgufBuilder b;
  b.KvStr("tokenizer.ggml.model", "llama");
  auto bytes = b.Build();
  auto f = GgufFile::FromBytes(bytes, "spm.gguf");
  ASSERT_TRUE(f.has_value());
  auto t = Tokenizer::FromGguf(**f);
  ASSERT_FALSE(t.has_value());
  EXPECT_EQ(t.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(t.error().message.find("spm.gguf: unsupported tokenizer model 'llama'"),
            std::string::npos);
  testing::GgufBuilder p;
  p.KvStr("tokenizer.ggml.model", "gpt2").KvStr("tokenizer.ggml.pre", "llama-bpe");
  bytes = p.Build();
  f = GgufFile::FromBytes(bytes, "l3.gguf");
  ASSERT_TRUE(f.has_value());
  EXPECT_NE(Tokenizer::FromGguf(**f).error().message.find("pre-tokenizer 'llama-bpe'"),
            std::string::npos);
  testing::GgufBuilder w;
  w.KvStr("tokenizer.ggml.model", "gpt2").KvI32Array("tokenizer.ggml.tokens", {1, 2});
  bytes = w.Build();
  f = GgufFile::FromBytes(bytes, "w.gguf");
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(Tokenizer::FromGguf(**f).error().code, ErrorCode::kCorruptData);
  // Byte-level BPE without its merges would split every word into bytes: refused.
  testing::GgufBuilder m;
  m.KvStr("tokenizer.ggml.model", "gpt2").KvStrArray("tokenizer.ggml.tokens", {"a", "b", "ab"});
  bytes = m.Build();
  f = GgufFile::FromBytes(bytes, "m.gguf");
  ASSERT_TRUE(f.has_value());
  auto no_merges = Tokenizer::FromGguf(**f);
  ASSERT_FALSE(no_merges.has_value());
  EXPECT_NE(no_merges.error().message.find("tokenizer.ggml.merges is missing"), std::string::npos)
      << no_merges.error().message;
}

TEST(TokenizerTest, RealModelMetadata) {
  REQUIRE_MODEL(m);
  const Tokenizer& t = *m->tok;
  EXPECT_EQ(t.vocab_size(), 49152u);
  EXPECT_EQ(t.pre_tokenizer(), PreTokenizer::kSmollm);
  EXPECT_EQ(t.bos_id(), 1);
  EXPECT_EQ(t.eos_id(), 2);
  EXPECT_EQ(t.pad_id(), 2);
  EXPECT_FALSE(t.add_bos());
  EXPECT_EQ(t.TokenText(0), "<|endoftext|>");
  EXPECT_EQ(t.GetTokenType(1), TokenType::kControl);
  EXPECT_EQ(t.FindToken("<|im_end|>"), 2);
  EXPECT_EQ(t.Encode("<|im_start|>user\n", true).front(), 1);
  EXPECT_NE(t.Encode("<|im_start|>", false).front(), 1);
}

// Replays token ids produced by llama.cpp (scripts/gen_tokenizer_vectors.py).
TEST(TokenizerTest, MatchesReferenceVectors) {
  REQUIRE_MODEL(m);
  std::ifstream in(std::string(KVGATE_SOURCE_DIR) + "/tests/engine_io/data/tokenizer_vectors.json");
  ASSERT_TRUE(in.good());
  const auto doc = nlohmann::json::parse(in, nullptr, false);
  ASSERT_FALSE(doc.is_discarded());
  const auto& cases = doc.at("cases");
  ASSERT_GE(cases.size(), 300u);
  int failures = 0;
  for (const auto& c : cases) {
    const std::string text = c.at("text");
    const bool special = c.at("parse_special");
    const auto expected = c.at("ids").get<std::vector<int32_t>>();
    const auto got = m->tok->Encode(text, special);
    if (got != expected && ++failures <= 10) {
      std::string g, e;
      for (int32_t id : got) g += std::to_string(id) + " ";
      for (int32_t id : expected) e += std::to_string(id) + " ";
      ADD_FAILURE() << "text " << nlohmann::json(text).dump() << " special=" << special
                    << "\n  got      " << g << "\n  expected " << e;
    }
    EXPECT_EQ(m->tok->Decode(got), text);
  }
  EXPECT_EQ(failures, 0) << "of " << cases.size();
}

std::string RandomUtf8(std::mt19937& rng, size_t n_codepoints) {
  static constexpr uint32_t kRanges[][2] = {{0x20, 0x7E},   {0x0A, 0x0A},     {0xA0, 0x24F},
                                            {0x400, 0x4FF}, {0x4E00, 0x9FFF}, {0x1F300, 0x1F64F},
                                            {0x300, 0x36F}, {0x3000, 0x303F}};
  std::string s;
  for (size_t i = 0; i < n_codepoints; ++i) {
    const auto& r = kRanges[rng() % std::size(kRanges)];
    const uint32_t cp = r[0] + rng() % (r[1] - r[0] + 1);
    if (cp < 0x80) {
      s += static_cast<char>(cp);
    } else if (cp < 0x800) {
      s += static_cast<char>(0xC0 | (cp >> 6));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      s += static_cast<char>(0xE0 | (cp >> 12));
      s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      s += static_cast<char>(0xF0 | (cp >> 18));
      s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }
  return s;
}

TEST(TokenizerTest, RoundTripsRandomUtf8) {
  REQUIRE_MODEL(m);
  std::mt19937 rng(7);
  for (int i = 0; i < 500; ++i) {
    const std::string text = RandomUtf8(rng, 1 + rng() % 80);
    const auto ids = m->tok->Encode(text, false);
    ASSERT_EQ(m->tok->Decode(ids), text);
    for (int32_t id : ids) ASSERT_TRUE(m->tok->IsValid(id));
  }
}

// Arbitrary bytes (invalid UTF-8 included) survive exactly, except the bytes the vocabulary has no
// symbol for, which are dropped.
TEST(TokenizerTest, RoundTripsArbitraryBytes) {
  REQUIRE_MODEL(m);
  bool has_symbol[256];
  int missing = 0;
  for (int b = 0; b < 256; ++b) {
    has_symbol[b] = m->tok->FindToken(ByteSymbol(b)).has_value();
    missing += has_symbol[b] ? 0 : 1;
  }
  EXPECT_EQ(missing, 21);
  std::mt19937 rng(5);
  for (int i = 0; i < 500; ++i) {
    std::string bytes, kept;
    const size_t n = 1 + rng() % 64;
    for (size_t j = 0; j < n; ++j) {
      const auto b = static_cast<uint8_t>(rng());
      bytes += static_cast<char>(b);
      if (has_symbol[b]) kept += static_cast<char>(b);
    }
    ASSERT_EQ(m->tok->Decode(m->tok->Encode(bytes, true)), kept);
  }
}

TEST(TokenizerTest, StreamingDecoderEmitsOnlyCompleteUtf8) {
  REQUIRE_MODEL(m);
  std::mt19937 rng(11);
  int held_back = 0;
  for (int i = 0; i < 200; ++i) {
    const std::string text = RandomUtf8(rng, 1 + rng() % 40);
    StreamingDecoder dec(*m->tok);
    std::string streamed;
    for (int32_t id : m->tok->Encode(text, false)) {
      const std::string piece = dec.Push(id);
      if (piece.empty()) ++held_back;
      // Every emitted chunk holds whole sequences only.
      streamed += piece;
      ASSERT_TRUE(text.starts_with(streamed));
      size_t j = 0;
      while (j < piece.size()) {
        const auto c = static_cast<unsigned char>(piece[j]);
        const size_t len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
        ASSERT_LE(j + len, piece.size()) << "split sequence emitted";
        j += len;
      }
    }
    streamed += dec.Finish();
    ASSERT_EQ(streamed, text);
  }
  EXPECT_GT(held_back, 0);  // byte-level BPE does split CJK/emoji across tokens
}

TEST(TokenizerTest, StreamingDecoderReplacesInvalidBytes) {
  auto t = Tokenizer::FromSpec(ToySpec(PreTokenizer::kGpt2));
  ASSERT_TRUE(t.has_value());
  StreamingDecoder dec(**t);
  EXPECT_EQ(dec.Push(0xE4), "");  // first byte of a 3-byte sequence: held
  EXPECT_EQ(dec.Push(0xBD), "");
  EXPECT_EQ(dec.Push(0xA0), "\xE4\xBD\xA0");
  EXPECT_EQ(dec.Push(0xFF), "\xEF\xBF\xBD");  // never valid
  EXPECT_EQ(dec.Push(0xE4), "");
  EXPECT_EQ(dec.Push('x'), "\xEF\xBF\xBDx");  // interrupted sequence
  EXPECT_EQ(dec.Push(0xF0), "");
  EXPECT_EQ(dec.Finish(), "\xEF\xBF\xBD");  // incomplete at the end
  EXPECT_EQ(dec.Push(0xED), "");
  EXPECT_EQ(dec.Push(0xA0), "\xEF\xBF\xBD\xEF\xBF\xBD");  // surrogate range: invalid
}

// A 4 MB mixed text round-trips. Its speed is printed, not asserted: a timed assertion fails on a
// slow or loaded machine, or in an unoptimized sanitizer build (the ASan stage's -O0), without a
// defect; the tokenizer's speed belongs to a benchmark.
TEST(TokenizerTest, EncodesAFourMegabyteTextAndDecodesItBack) {
  REQUIRE_MODEL(m);
  std::mt19937 rng(3);
  std::string text;
  const char* words[] = {"the",     "model", "tokenizer",  "of",  "1234", "café",
                         "你好",    "  ",    "\n",         "{x:", "'s",   "🙂",
                         "quickly", "and",   "function()", "GPU"};
  while (text.size() < (4u << 20)) {
    text += words[rng() % std::size(words)];
    text += ' ';
  }
  // CPU time of this thread: wall time is meaningless on a shared, oversubscribed build machine.
  auto cpu_seconds = [] {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
  };
  const double start = cpu_seconds();
  const auto ids = m->tok->Encode(text, false);
  const double secs = cpu_seconds() - start;
  const double tps = static_cast<double>(ids.size()) / secs;
  RecordProperty("tokens_per_cpu_second", std::to_string(static_cast<int64_t>(tps)));
  std::printf("encoded %zu bytes -> %zu tokens in %.3f CPU s: %.0f tokens/s, %.1f MB/s\n",
              text.size(), ids.size(), secs, tps, static_cast<double>(text.size()) / secs / 1e6);
  EXPECT_EQ(m->tok->Decode(ids), text);
  EXPECT_GT(ids.size(), text.size() / 8) << "a mixed text is not a few long tokens";
}

}  // namespace
}  // namespace kvgate::engine

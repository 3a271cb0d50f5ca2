// libFuzzer target: the byte-level BPE tokenizer (local_engine/tokenizer.h).
//
// Two vocabularies: the bundled model's (models/SmolLM2-135M-Instruct.Q4_1.gguf, the file the
// tests use; scripts/setup.sh fetches it), or, where it is absent, a small synthetic one; and a
// toy vocabulary with a CONTROL and a USER_DEFINED token, always.
//
// Input: byte 0 picks the vocabulary and the mode, the rest is text (or token ids). Checked,
// besides no crash / sanitizer report:
//  - PreTokenize: non-empty pieces that concatenate to the text;
//  - Encode: valid ids, and Decode(Encode(text)) == text without the bytes the vocabulary has no
//    symbol for (the documented exact round trip), with and without parse_special;
//  - StreamingDecoder: always valid UTF-8, equal to Decode when that is valid UTF-8;
//  - arbitrary ids (valid or not) decode without trouble.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/utf8.h"
#include "local_engine/gguf.h"
#include "local_engine/tokenizer.h"

namespace {

using kvgate::engine::GgufFile;
using kvgate::engine::PreTokenizer;
using kvgate::engine::Tokenizer;
using kvgate::engine::TokenizerSpec;

[[noreturn]] void Fail(const char* what, std::string_view text) {
  std::fprintf(stderr, "tokenizer_fuzz: %s\ninput (%zu bytes): %.*s\n", what, text.size(),
               static_cast<int>(text.size() > 1024 ? 1024 : text.size()), text.data());
  std::abort();
}

// GPT-2's byte -> code point table (the byte-level symbols), UTF-8 encoded.
std::string ByteSymbol(int b) {
  auto direct = [](int x) { return (x >= 33 && x <= 126) || (x >= 161 && x <= 172) || x >= 174; };
  int cp = b;
  if (!direct(b)) {
    cp = 256;
    for (int x = 0; x < b; ++x) cp += direct(x) ? 0 : 1;
  }
  std::string s;
  kvgate::AppendUtf8(static_cast<uint32_t>(cp), s);
  return s;
}

// The 256 byte symbols less a few (so that dropping is exercised), merges over common pairs, a
// CONTROL and a USER_DEFINED token.
TokenizerSpec ToySpec(PreTokenizer pre) {
  TokenizerSpec spec;
  for (int b = 0; b < 256; ++b) {
    if (b != 0x04 && b != 0xC0 && b != 0xFF) spec.tokens.push_back(ByteSymbol(b));
  }
  const std::string sp = ByteSymbol(' ');
  spec.merges = {"t h", "th e", sp + " t", sp + "t he", "i n", "in g", "e r", "a a", "aa a",
                 "1 2", sp + " " + sp};
  for (const std::string& t : {std::string("th"), std::string("the"), sp + "t", sp + "the",
                               std::string("in"), std::string("ing"), std::string("er"),
                               std::string("aa"), std::string("aaa"), std::string("12"),
                               sp + sp}) {
    spec.tokens.push_back(t);
  }
  spec.token_types.assign(spec.tokens.size(), 1);
  spec.tokens.push_back("<|im_end|>");
  spec.token_types.push_back(3);  // CONTROL: matched only with parse_special
  spec.tokens.push_back("<tool>");
  spec.token_types.push_back(4);  // USER_DEFINED: always matched
  spec.tokens.push_back("<tool_call>");
  spec.token_types.push_back(4);  // longer, same first bytes: the longest must win
  spec.eos_id = static_cast<int32_t>(spec.tokens.size() - 3);
  spec.pre = pre;
  return spec;
}

struct Vocab {
  std::unique_ptr<Tokenizer> tokenizer;
  bool has_symbol[256];  // whether a byte survives Encode
};

Vocab MakeVocab(std::unique_ptr<Tokenizer> t) {
  Vocab v{std::move(t), {}};
  for (int b = 0; b < 256; ++b) {
    v.has_symbol[b] = !v.tokenizer->Encode(std::string(1, static_cast<char>(b)), false).empty();
  }
  return v;
}

struct Vocabs {
  Vocab model;  // the bundled model's, else the toy one with the SmolLM pre-tokenizer
  Vocab toy;
};

Vocabs LoadVocabs() {
  auto toy = Tokenizer::FromSpec(ToySpec(PreTokenizer::kGpt2));
  if (!toy) Fail(("toy vocabulary rejected: " + toy.error().message).c_str(), "");
  std::unique_ptr<Tokenizer> model;
  const std::string path =
      std::string(KVGATE_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
  std::error_code ec;
  if (std::filesystem::exists(path, ec)) {
    auto file = GgufFile::Open(path);
    if (file) {
      auto t = Tokenizer::FromGguf(**file);
      if (t) model = std::move(*t);
    }
  }
  if (model == nullptr) {
    std::fprintf(stderr, "tokenizer_fuzz: %s not loaded; a synthetic vocabulary stands in\n",
                 path.c_str());
    model = std::move(*Tokenizer::FromSpec(ToySpec(PreTokenizer::kSmollm)));
  }
  return Vocabs{MakeVocab(std::move(model)), MakeVocab(std::move(*toy))};
}

void CheckText(const Vocab& v, std::string_view text, bool parse_special) {
  const Tokenizer& t = *v.tokenizer;
  std::string joined;
  for (std::string_view piece : t.PreTokenize(text)) {
    if (piece.empty()) Fail("PreTokenize returned an empty piece", text);
    joined.append(piece);
  }
  if (joined != text) Fail("PreTokenize pieces do not concatenate to the text", text);

  const std::vector<int32_t> ids = t.Encode(text, parse_special);
  for (int32_t id : ids) {
    if (!t.IsValid(id)) Fail("Encode returned an id outside the vocabulary", text);
  }
  std::string expected;
  for (char c : text) {
    if (v.has_symbol[static_cast<uint8_t>(c)]) expected.push_back(c);
  }
  if (t.Decode(ids) != expected) Fail("Decode(Encode(text)) is not the text", text);

  kvgate::engine::StreamingDecoder stream(t);
  std::string streamed;
  for (int32_t id : ids) streamed += stream.Push(id);
  streamed += stream.Finish();
  if (!kvgate::IsValidUtf8(streamed)) Fail("StreamingDecoder wrote invalid UTF-8", text);
  if (kvgate::IsValidUtf8(expected) && streamed != expected) {
    Fail("StreamingDecoder differs from Decode on valid UTF-8", text);
  }
}

// Ids straight from the input, most of them valid, some not.
void CheckIds(const Vocab& v, std::string_view bytes) {
  const Tokenizer& t = *v.tokenizer;
  std::vector<int32_t> ids;
  for (size_t i = 0; i + 1 < bytes.size(); i += 2) {
    const auto raw = static_cast<uint16_t>(static_cast<uint8_t>(bytes[i]) |
                                           static_cast<uint8_t>(bytes[i + 1]) << 8);
    ids.push_back(raw >= 0xFFF0 ? -1 - (raw & 0xF) : static_cast<int32_t>(raw % (t.vocab_size() + 8)));
  }
  for (bool render : {true, false}) {
    const std::string decoded = t.Decode(ids, render);
    kvgate::engine::StreamingDecoder stream(t, render);
    std::string streamed;
    for (int32_t id : ids) {
      streamed += stream.Push(id);
      (void)t.TokenBytes(id);
    }
    streamed += stream.Finish();
    if (!kvgate::IsValidUtf8(streamed)) Fail("StreamingDecoder wrote invalid UTF-8", bytes);
    if (kvgate::IsValidUtf8(decoded) && streamed != decoded) {
      Fail("StreamingDecoder differs from Decode on valid UTF-8", bytes);
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const Vocabs vocabs = LoadVocabs();
  if (size < 1) return 0;
  const uint8_t mode = data[0];
  const std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  const Vocab& v = (mode & 1) ? vocabs.toy : vocabs.model;
  if (mode & 4) {
    CheckIds(v, rest);
  } else {
    CheckText(v, rest, (mode & 2) != 0);
  }
  return 0;
}

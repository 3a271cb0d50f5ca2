#include "local_engine/tokenizer.h"

#include <algorithm>
#include <string>
#include <type_traits>

#include "common/str_cat.h"
#include "common/utf8.h"
#include "local_engine/tokenizer_unicode.h"

namespace kvgate::engine {
namespace {

using kvgate::StrCat;

using kvgate::AppendUtf8;

// Result of decoding one UTF-8 sequence at the start of a byte range.
struct Utf8Step {
  enum Kind { kValid, kInvalid, kIncomplete } kind;
  uint32_t cp = 0;   // for kValid
  uint32_t len = 1;  // bytes consumed: sequence length for kValid, 1 for kInvalid
};

// Strict UTF-8 (Unicode table 3-7): no overlongs, no surrogates, nothing above U+10FFFF.
// kIncomplete: the bytes so far are a valid prefix but the range ends before the sequence does.
Utf8Step DecodeUtf8(const uint8_t* p, size_t n) {
  const uint8_t b0 = p[0];
  if (b0 < 0x80) return {Utf8Step::kValid, b0, 1};
  uint32_t len;
  uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return {Utf8Step::kInvalid};
  }
  for (uint32_t i = 1; i < len; ++i) {
    if (i >= n) return {Utf8Step::kIncomplete};
    const uint8_t b = p[i];
    if (i == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) return {Utf8Step::kInvalid};
  }
  uint32_t cp = b0 & (0x7F >> len);
  for (uint32_t i = 1; i < len; ++i) cp = (cp << 6) | (p[i] & 0x3F);
  return {Utf8Step::kValid, cp, len};
}

// GPT-2's reversible byte <-> printable code point mapping (bytes_to_unicode).
struct ByteMap {
  uint32_t byte_to_cp[256] = {};
  int16_t cp_to_byte[324] = {};  // -1 where the code point is not a byte symbol
  constexpr ByteMap() {
    for (int16_t& b : cp_to_byte) b = -1;
    uint32_t extra = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
      byte_to_cp[b] = printable ? b : extra++;
      cp_to_byte[byte_to_cp[b]] = static_cast<int16_t>(b);
    }
  }
};
constexpr ByteMap kByteMap;

std::optional<int> HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return std::nullopt;
}

// Byte-level token text -> raw bytes. Code points that are not byte symbols are kept as UTF-8.
std::string ByteLevelDecode(std::string_view text) {
  const ByteMap& map = kByteMap;
  std::string out;
  const auto* p = reinterpret_cast<const uint8_t*>(text.data());
  size_t i = 0;
  while (i < text.size()) {
    const Utf8Step s = DecodeUtf8(p + i, text.size() - i);
    if (s.kind == Utf8Step::kValid && s.cp < 324 && map.cp_to_byte[s.cp] >= 0) {
      out += static_cast<char>(map.cp_to_byte[s.cp]);
      i += s.len;
    } else if (s.kind == Utf8Step::kValid) {
      out.append(text.substr(i, s.len));
      i += s.len;
    } else {
      out += text[i++];
    }
  }
  return out;
}

// One code point of the input with its byte span; invalid bytes are single "code points" of class
// kOther so that pre-tokenization never loses or alters a byte.
struct Cpt {
  uint32_t cp;
  uint32_t offset;
  uint8_t cls;
};

void DecodeForSplit(std::string_view text, std::vector<Cpt>& out) {
  out.clear();
  const auto* p = reinterpret_cast<const uint8_t*>(text.data());
  size_t i = 0;
  while (i < text.size()) {
    const Utf8Step s = DecodeUtf8(p + i, text.size() - i);
    if (s.kind == Utf8Step::kValid) {
      out.push_back({s.cp, static_cast<uint32_t>(i), unicode::Classify(s.cp)});
      i += s.len;
    } else {
      out.push_back({0xFFFFFFFFu, static_cast<uint32_t>(i), unicode::kOther});
      ++i;
    }
  }
}

// The GPT-2 pattern over cps[begin, end); appends piece end indices (exclusive) to `cuts`.
// The lookahead of \s+(?!\S) sees only this chunk, as in the reference implementations.
void SplitGpt2(const std::vector<Cpt>& cps, size_t begin, size_t end, std::vector<size_t>& cuts) {
  auto cls = [&](size_t i) -> uint8_t { return i < end ? cps[i].cls : 0xFF; };
  auto cp = [&](size_t i) -> uint32_t { return i < end ? cps[i].cp : 0; };
  size_t pos = begin;
  while (pos < end) {
    const uint32_t c = cps[pos].cp;
    // 's|'t|'re|'ve|'m|'ll|'d
    if (c == '\'' && pos + 1 < end) {
      const uint32_t n = cp(pos + 1);
      if (n == 's' || n == 't' || n == 'm' || n == 'd') {
        pos += 2;
        cuts.push_back(pos);
        continue;
      }
      const uint32_t nn = cp(pos + 2);
      if ((n == 'r' && nn == 'e') || (n == 'v' && nn == 'e') || (n == 'l' && nn == 'l')) {
        pos += 3;
        cuts.push_back(pos);
        continue;
      }
    }
    // ' ?\p{L}+' | ' ?\p{N}+' | ' ?[^\s\p{L}\p{N}]+'
    const size_t body = (c == ' ') ? pos + 1 : pos;
    const uint8_t k = cls(body);
    if (k == unicode::kLetter || k == unicode::kNumber || k == unicode::kOther) {
      size_t p = body + 1;
      while (p < end && cls(p) == k) ++p;
      pos = p;
      cuts.push_back(pos);
      continue;
    }
    // \s+(?!\S) | \s+
    size_t w = pos;
    while (w < end && cls(w) == unicode::kSpace) ++w;
    if (w > pos) {
      if (w - pos > 1 && w < end) --w;  // leave the last space to prefix the next piece
      pos = w;
      cuts.push_back(pos);
      continue;
    }
    cuts.push_back(++pos);  // not reachable for well-formed classes; keeps progress guaranteed
  }
}

}  // namespace

Result<std::unique_ptr<Tokenizer>> Tokenizer::FromGguf(const GgufFile& file) {
  const std::string where = file.path() + ": ";
  const auto model = file.GetString("tokenizer.ggml.model");
  if (model != "gpt2") {
    return MakeError(ErrorCode::kInvalidArgument,
                     StrCat(where, "unsupported tokenizer model '", model.value_or("<missing>"),
                         "' (only byte-level BPE 'gpt2' is supported)"));
  }
  TokenizerSpec spec;
  const std::string pre = file.GetString("tokenizer.ggml.pre").value_or("gpt2");
  if (pre == "smollm") {
    spec.pre = PreTokenizer::kSmollm;
  } else if (pre == "gpt2" || pre == "default") {
    spec.pre = PreTokenizer::kGpt2;
  } else {
    return MakeError(ErrorCode::kInvalidArgument,
                     StrCat(where, "unsupported pre-tokenizer '", pre, "' (have: gpt2, smollm)"));
  }
  auto strings = [&](std::string_view key, std::vector<std::string>& out) -> Status {
    const GgufArray* arr = file.GetArray(key);
    if (arr == nullptr) return {};
    out.reserve(arr->size());
    for (const GgufValue& v : *arr) {
      const auto* s = std::get_if<std::string>(&v.v);
      if (s == nullptr) {
        return MakeError(ErrorCode::kCorruptData, StrCat(where, key, " must be an array of strings"));
      }
      out.push_back(*s);
    }
    return {};
  };
  if (auto st = strings("tokenizer.ggml.tokens", spec.tokens); !st)
    return std::unexpected(st.error());
  if (auto st = strings("tokenizer.ggml.merges", spec.merges); !st)
    return std::unexpected(st.error());
  if (spec.tokens.empty()) {
    return MakeError(ErrorCode::kCorruptData, where + "tokenizer.ggml.tokens is missing or empty");
  }
  if (spec.merges.empty()) {  // byte-level BPE without merges splits text into single bytes
    return MakeError(ErrorCode::kCorruptData, where + "tokenizer.ggml.merges is missing or empty");
  }
  if (const GgufArray* types = file.GetArray("tokenizer.ggml.token_type")) {
    spec.token_types.reserve(types->size());
    for (const GgufValue& v : *types) {
      const auto* i = std::get_if<int64_t>(&v.v);
      const auto* u = std::get_if<uint64_t>(&v.v);
      if (i == nullptr && u == nullptr) {
        return MakeError(ErrorCode::kCorruptData,
                         where + "tokenizer.ggml.token_type must be an array of integers");
      }
      spec.token_types.push_back(i ? static_cast<int32_t>(*i) : static_cast<int32_t>(*u));
    }
  }
  auto id = [&](std::string_view key) -> std::optional<int32_t> {
    const auto v = file.GetInt(key);
    if (!v || *v < 0 || *v > INT32_MAX) return std::nullopt;
    return static_cast<int32_t>(*v);
  };
  spec.bos_id = id("tokenizer.ggml.bos_token_id");
  spec.eos_id = id("tokenizer.ggml.eos_token_id");
  spec.pad_id = id("tokenizer.ggml.padding_token_id");
  spec.add_bos = file.GetBool("tokenizer.ggml.add_bos_token").value_or(false);
  auto tok = FromSpec(std::move(spec));
  if (!tok) return MakeError(tok.error().code, where + tok.error().message);
  return tok;
}

Result<std::unique_ptr<Tokenizer>> Tokenizer::FromSpec(TokenizerSpec spec) {
  if (spec.tokens.empty() || spec.tokens.size() > static_cast<size_t>(INT32_MAX)) {
    return MakeError(ErrorCode::kCorruptData, "vocabulary size out of range");
  }
  if (!spec.token_types.empty() && spec.token_types.size() != spec.tokens.size()) {
    return MakeError(ErrorCode::kCorruptData, StrCat("token_type has ", spec.token_types.size(),
                                                  " entries for ", spec.tokens.size(), " tokens"));
  }
  const size_t n = spec.tokens.size();
  for (const auto& opt : {spec.bos_id, spec.eos_id, spec.pad_id}) {
    if (opt && static_cast<size_t>(*opt) >= n) {
      return MakeError(ErrorCode::kCorruptData, StrCat("special token id ", *opt, " out of range"));
    }
  }
  std::unique_ptr<Tokenizer> t(new Tokenizer());
  t->pre_ = spec.pre;
  t->bos_id_ = spec.bos_id;
  t->eos_id_ = spec.eos_id;
  t->pad_id_ = spec.pad_id;
  t->add_bos_ = spec.add_bos;
  t->token_text_ = std::move(spec.tokens);
  t->token_type_.resize(n, TokenType::kNormal);
  t->token_bytes_.resize(n);
  t->text_to_id_.reserve(n);
  std::vector<int32_t> specials;
  for (size_t i = 0; i < n; ++i) {
    const int32_t raw_type = spec.token_types.empty() ? 1 : spec.token_types[i];
    if (raw_type < 0 || raw_type > 6) {
      return MakeError(ErrorCode::kCorruptData, StrCat("token ", i, " has unknown type ", raw_type));
    }
    const auto type = static_cast<TokenType>(raw_type);
    const std::string& text = t->token_text_[i];
    t->token_type_[i] = type;
    t->text_to_id_.emplace(text, static_cast<int32_t>(i));  // first occurrence wins
    if (type == TokenType::kControl || type == TokenType::kUserDefined) {
      t->token_bytes_[i] = text;
      if (!text.empty()) specials.push_back(static_cast<int32_t>(i));
    } else if (type == TokenType::kByte && text.size() == 6 && text.starts_with("<0x") &&
               text[5] == '>' && HexDigit(text[3]) && HexDigit(text[4])) {
      t->token_bytes_[i] =
          std::string(1, static_cast<char>(*HexDigit(text[3]) * 16 + *HexDigit(text[4])));
    } else {
      t->token_bytes_[i] = ByteLevelDecode(text);
    }
  }
  std::stable_sort(specials.begin(), specials.end(), [&](int32_t a, int32_t b) {
    return t->token_text_[a].size() > t->token_text_[b].size();
  });
  for (int32_t id : specials) {
    t->specials_by_first_byte_[static_cast<uint8_t>(t->token_text_[id][0])].push_back(id);
  }
  const ByteMap& map = kByteMap;
  for (uint32_t b = 0; b < 256; ++b) {
    std::string sym;
    AppendUtf8(map.byte_to_cp[b], sym);
    auto it = t->text_to_id_.find(sym);
    if (it != t->text_to_id_.end()) {
      t->byte_token_[b] = it->second;
    } else if (b >= 33 && b <= 126) {  // a byte-level vocabulary has at least printable ASCII
      return MakeError(ErrorCode::kCorruptData, StrCat("vocabulary lacks the symbol for byte ", b));
    } else {
      t->byte_token_[b] = -1;
    }
  }
  size_t slots = 16;
  while (slots < spec.merges.size() * 2) slots *= 2;
  t->merge_slots_.assign(slots, MergeSlot{kEmptyKey, Merge{0, 0}});
  t->merge_mask_ = slots - 1;
  for (size_t r = 0; r < spec.merges.size(); ++r) {
    const std::string& m = spec.merges[r];
    const size_t sp = m.find(' ', 1);
    if (sp == std::string::npos) {
      return MakeError(ErrorCode::kCorruptData, StrCat("merge ", r, " is not 'left right'"));
    }
    const auto left = t->text_to_id_.find(m.substr(0, sp));
    const auto right = t->text_to_id_.find(m.substr(sp + 1));
    const auto merged = t->text_to_id_.find(m.substr(0, sp) + m.substr(sp + 1));
    if (left == t->text_to_id_.end() || right == t->text_to_id_.end() ||
        merged == t->text_to_id_.end()) {
      continue;  // a merge that can never apply (as in the reference tokenizers)
    }
    t->AddMerge(left->second, right->second, Merge{static_cast<int32_t>(r), merged->second});
  }
  return t;
}

namespace {
size_t SlotOf(uint64_t key) { return static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> 20); }
}  // namespace

const Tokenizer::Merge* Tokenizer::FindMerge(int32_t left, int32_t right) const {
  const uint64_t key = PairKey(left, right);
  for (size_t i = SlotOf(key) & merge_mask_;; i = (i + 1) & merge_mask_) {
    const MergeSlot& slot = merge_slots_[i];
    if (slot.key == key) return &slot.merge;
    if (slot.key == kEmptyKey) return nullptr;
  }
}

bool Tokenizer::AddMerge(int32_t left, int32_t right, Merge merge) {
  const uint64_t key = PairKey(left, right);
  for (size_t i = SlotOf(key) & merge_mask_;; i = (i + 1) & merge_mask_) {
    MergeSlot& slot = merge_slots_[i];
    if (slot.key == key) return false;  // the first (highest priority) rank wins
    if (slot.key == kEmptyKey) {
      slot = {key, merge};
      return true;
    }
  }
}

std::optional<int32_t> Tokenizer::FindToken(std::string_view text) const {
  const auto it = text_to_id_.find(std::string(text));
  if (it == text_to_id_.end()) return std::nullopt;
  return it->second;
}

const std::string& Tokenizer::TokenBytes(int32_t id) const {
  static const std::string kEmpty;
  return IsValid(id) ? token_bytes_[id] : kEmpty;
}

std::vector<int32_t> Tokenizer::Encode(std::string_view text, bool parse_special) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 1);
  size_t start = 0;  // beginning of the pending plain-text fragment
  size_t i = 0;
  while (i < text.size()) {
    const auto& candidates = specials_by_first_byte_[static_cast<uint8_t>(text[i])];
    int32_t hit = -1;
    for (int32_t id : candidates) {
      if (!parse_special && token_type_[id] == TokenType::kControl) continue;
      if (text.substr(i).starts_with(token_text_[id])) {
        hit = id;
        break;
      }
    }
    if (hit < 0) {
      ++i;
      continue;
    }
    EncodeText(text.substr(start, i - start), out);
    out.push_back(hit);
    i += token_text_[hit].size();
    start = i;
  }
  EncodeText(text.substr(start), out);
  return out;
}

std::vector<std::string_view> Tokenizer::PreTokenize(std::string_view text) const {
  std::vector<std::string_view> pieces;
  if (text.empty()) return pieces;
  std::vector<Cpt> cps;
  cps.reserve(text.size());
  DecodeForSplit(text, cps);
  std::vector<size_t> cuts;
  cuts.reserve(cps.size() / 2 + 1);
  if (pre_ == PreTokenizer::kSmollm) {
    // Chunks: each \p{N} code point alone, and each maximal run of other code points.
    size_t b = 0;
    while (b < cps.size()) {
      if (cps[b].cls == unicode::kNumber) {
        cuts.push_back(++b);
        continue;
      }
      size_t e = b;
      while (e < cps.size() && cps[e].cls != unicode::kNumber) ++e;
      SplitGpt2(cps, b, e, cuts);
      b = e;
    }
  } else {
    SplitGpt2(cps, 0, cps.size(), cuts);
  }
  pieces.reserve(cuts.size());
  size_t prev = 0;
  for (size_t cut : cuts) {
    const size_t from = cps[prev].offset;
    const size_t to = cut < cps.size() ? cps[cut].offset : text.size();
    pieces.push_back(text.substr(from, to - from));
    prev = cut;
  }
  return pieces;
}

void Tokenizer::EncodeText(std::string_view text, std::vector<int32_t>& out) const {
  EncodeScratch scratch;
  for (std::string_view piece : PreTokenize(text)) EncodePiece(piece, scratch, out);
}

void Tokenizer::EncodePiece(std::string_view piece, EncodeScratch& scratch,
                            std::vector<int32_t>& out) const {
  if (piece.size() == 1) {
    const int32_t id = byte_token_[static_cast<uint8_t>(piece[0])];
    if (id >= 0) out.push_back(id);
    return;
  }
  // Symbols form a doubly linked list over the piece's bytes. A byte the vocabulary has no symbol
  // for starts as id -1: it never merges, so it separates its neighbours, and it is dropped at the
  // end (as llama.cpp does). Merged-away symbols are unlinked and also set to -1.
  auto& sym = scratch.symbols;
  sym.resize(piece.size());
  for (size_t i = 0; i < piece.size(); ++i) {
    sym[i] = {byte_token_[static_cast<uint8_t>(piece[i])], static_cast<int32_t>(i) - 1,
              i + 1 < piece.size() ? static_cast<int32_t>(i + 1) : -1};
  }
  // A min-heap on (rank, left position): lowest rank first, leftmost first among equal ranks.
  auto& heap = scratch.heap;
  heap.clear();
  const auto later = [](const PairCandidate& a, const PairCandidate& b) {
    return a.rank != b.rank ? a.rank > b.rank : a.left > b.left;
  };
  auto push_pair = [&](int32_t left) {
    if (left < 0 || sym[left].next < 0) return;
    const int32_t right = sym[left].next;
    if (sym[left].id < 0 || sym[right].id < 0) return;
    const Merge* m = FindMerge(sym[left].id, sym[right].id);
    if (m == nullptr) return;
    heap.push_back({m->rank, m->result, left, sym[left].id, sym[right].id});
    std::push_heap(heap.begin(), heap.end(), later);
  };
  for (size_t i = 0; i + 1 < piece.size(); ++i) push_pair(static_cast<int32_t>(i));
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), later);
    const PairCandidate top = heap.back();
    heap.pop_back();
    Symbol& left = sym[top.left];
    // Stale entries: the left symbol changed or its right neighbour is no longer the same pair.
    if (left.id != top.left_id || left.next < 0 || sym[left.next].id != top.right_id) continue;
    Symbol& right = sym[left.next];
    left.id = top.result;
    left.next = right.next;
    if (right.next >= 0) sym[right.next].prev = top.left;
    right.id = -1;
    push_pair(left.prev);
    push_pair(top.left);
  }
  for (int32_t i = 0; i >= 0; i = sym[i].next) {
    if (sym[i].id >= 0) out.push_back(sym[i].id);  // -1: a byte without a symbol is dropped
  }
}

std::string Tokenizer::Decode(std::span<const int32_t> ids, bool render_special) const {
  std::string out;
  for (int32_t id : ids) {
    if (!IsValid(id)) continue;
    if (!render_special && token_type_[id] == TokenType::kControl) continue;
    out += token_bytes_[id];
  }
  return out;
}

std::string StreamingDecoder::Push(int32_t id) {
  if (!tokenizer_.IsValid(id)) return {};
  if (!render_special_ && tokenizer_.GetTokenType(id) == TokenType::kControl) return {};
  pending_ += tokenizer_.TokenBytes(id);
  std::string out;
  const auto* p = reinterpret_cast<const uint8_t*>(pending_.data());
  size_t i = 0;
  while (i < pending_.size()) {
    const Utf8Step s = DecodeUtf8(p + i, pending_.size() - i);
    if (s.kind == Utf8Step::kIncomplete) break;
    if (s.kind == Utf8Step::kValid) {
      out.append(pending_, i, s.len);
    } else {
      out += "\xEF\xBF\xBD";  // U+FFFD
    }
    i += s.len;
  }
  pending_.erase(0, i);
  return out;
}

std::string StreamingDecoder::Finish() {
  std::string out = pending_.empty() ? "" : "\xEF\xBF\xBD";
  pending_.clear();
  return out;
}

}  // namespace kvgate::engine

// Byte-level BPE tokenizer (GPT-2 family) built from a GGUF file's tokenizer.ggml.* metadata.
//
// Encoding is: split out special tokens -> pre-tokenize (regex-like split over code points) ->
// map each piece's bytes to the 256 byte-level symbols -> merge adjacent pairs by merge rank
// (lowest rank first, leftmost first on ties). Decoding is exact: Decode(Encode(s)) == s for every
// byte string s, valid UTF-8 or not, whose bytes all have a symbol in the vocabulary (see Encode).
//
// Thread safety: a Tokenizer is immutable after construction; Encode/Decode may run concurrently.
// StreamingDecoder is per stream and not thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/error.h"
#include "local_engine/gguf.h"

namespace kvgate::engine {

// llama.cpp's token types (tokenizer.ggml.token_type).
enum class TokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,      // <|im_start|>, <|endoftext|>, ...: matched in text only with parse_special
  kUserDefined = 4,  // added tokens: always matched in text
  kUnused = 5,
  kByte = 6,
};

// How text is split into pieces before BPE (tokenizer.ggml.pre).
enum class PreTokenizer {
  kGpt2,    // 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  kSmollm,  // every \p{N} code point split off first, then the GPT-2 pattern inside each chunk
};

// Everything a tokenizer is built from; FromGguf fills it from metadata, tests may fill it
// directly.
struct TokenizerSpec {
  std::vector<std::string> tokens;   // byte-level encoded token text, index = id
  std::vector<int32_t> token_types;  // TokenType values; empty = all kNormal
  std::vector<std::string> merges;   // "left right", highest priority first
  PreTokenizer pre = PreTokenizer::kGpt2;
  std::optional<int32_t> bos_id, eos_id, pad_id;
  bool add_bos = false;  // tokenizer.ggml.add_bos_token
};

class Tokenizer {
 public:
  // Errors: kInvalidArgument for unsupported tokenizer models / pre-tokenizers, kCorruptData for
  // inconsistent data (missing byte symbols, ids out of range, wrong metadata types).
  static Result<std::unique_ptr<Tokenizer>> FromGguf(const GgufFile& file);
  static Result<std::unique_ptr<Tokenizer>> FromSpec(TokenizerSpec spec);

  // Text -> token ids. No BOS is added (see add_bos()). With parse_special, the text of CONTROL
  // tokens (e.g. "<|im_end|>") becomes that token; without it such text is tokenized as plain text.
  // USER_DEFINED tokens are always matched. Where several special tokens start at one position the
  // longest wins. Never fails. Bytes the vocabulary has no symbol for are dropped, as in llama.cpp
  // (SmolLM2 lacks 21 of the 256: the control characters 0x04 0x06 0x13 0x14 0x16 0x1D and bytes
  // that never occur in UTF-8), so Decode(Encode(s)) == s for all text without those bytes.
  std::vector<int32_t> Encode(std::string_view text, bool parse_special) const;

  // The pieces plain text (no special tokens) is split into before BPE; views into `text`, in
  // order, concatenating to `text`.
  std::vector<std::string_view> PreTokenize(std::string_view text) const;

  // Token ids -> the exact bytes they stand for (special tokens as their text unless
  // render_special is false). Ids outside the vocabulary contribute nothing.
  std::string Decode(std::span<const int32_t> ids, bool render_special = true) const;
  // The bytes of one token; empty for an id outside the vocabulary.
  const std::string& TokenBytes(int32_t id) const;

  size_t vocab_size() const { return token_text_.size(); }
  bool IsValid(int32_t id) const { return id >= 0 && static_cast<size_t>(id) < vocab_size(); }
  // Token text as stored (byte-level encoded for normal tokens). REQUIRES: IsValid(id).
  const std::string& TokenText(int32_t id) const { return token_text_[id]; }
  TokenType GetTokenType(int32_t id) const { return token_type_[id]; }  // REQUIRES: IsValid(id)
  std::optional<int32_t> FindToken(std::string_view text) const;        // by stored text

  std::optional<int32_t> bos_id() const { return bos_id_; }
  std::optional<int32_t> eos_id() const { return eos_id_; }
  std::optional<int32_t> pad_id() const { return pad_id_; }
  bool add_bos() const { return add_bos_; }
  PreTokenizer pre_tokenizer() const { return pre_; }

 private:
  struct Merge {
    int32_t rank;
    int32_t result;
  };
  // Per-call working memory for EncodePiece, reused across the pieces of one Encode call.
  struct Symbol {
    int32_t id;
    int32_t prev;
    int32_t next;
  };
  struct PairCandidate {
    int32_t rank;
    int32_t result;
    int32_t left;  // symbol index of the pair's left half
    int32_t left_id;
    int32_t right_id;
  };
  struct EncodeScratch {
    std::vector<Symbol> symbols;
    std::vector<PairCandidate> heap;
  };
  static uint64_t PairKey(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
           static_cast<uint32_t>(right);
  }
  Tokenizer() = default;
  void EncodeText(std::string_view text, std::vector<int32_t>& out) const;
  void EncodePiece(std::string_view piece, EncodeScratch& scratch, std::vector<int32_t>& out) const;

  // Constant after construction.
  std::vector<std::string> token_text_;
  std::vector<std::string> token_bytes_;
  std::vector<TokenType> token_type_;
  std::unordered_map<std::string, int32_t> text_to_id_;
  // Merge table: open addressing over PairKey, power-of-two size, kEmptyKey in free slots. Flat
  // because this lookup dominates encoding time.
  struct MergeSlot {
    uint64_t key;
    Merge merge;
  };
  static constexpr uint64_t kEmptyKey = ~uint64_t{0};
  const Merge* FindMerge(int32_t left, int32_t right) const;
  bool AddMerge(int32_t left, int32_t right, Merge merge);  // false when the pair exists already
  std::vector<MergeSlot> merge_slots_;
  uint64_t merge_mask_ = 0;
  int32_t byte_token_[256] = {};  // the symbol of each raw byte, -1 if none
  // Special tokens that may be matched in text, by first byte, longest first.
  std::vector<int32_t> specials_by_first_byte_[256];
  PreTokenizer pre_ = PreTokenizer::kGpt2;
  std::optional<int32_t> bos_id_, eos_id_, pad_id_;
  bool add_bos_ = false;
};

// Turns a stream of token ids into text that only ever contains complete UTF-8 sequences: bytes of
// a sequence split across tokens are held back until the sequence is complete. Bytes that can never
// form valid UTF-8 are emitted as U+FFFD, so the output is always valid UTF-8 (for valid input the
// concatenated output equals Tokenizer::Decode of all ids).
class StreamingDecoder {
 public:
  // `tokenizer` must outlive the decoder.
  explicit StreamingDecoder(const Tokenizer& tokenizer, bool render_special = true)
      : tokenizer_(tokenizer), render_special_(render_special) {}
  // Returns the text that became complete with this token (possibly empty).
  std::string Push(int32_t id);
  // End of stream: returns whatever is still held (an incomplete sequence becomes U+FFFD).
  std::string Finish();

 private:
  const Tokenizer& tokenizer_;
  bool render_special_;
  std::string pending_;
};

}  // namespace kvgate::engine

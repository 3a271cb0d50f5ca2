// The vocabulary as a byte trie, for constrained decoding: which tokens may come next.
//
//   auto trie = TokenTrie::FromTokenizer(tokenizer);     // once per loaded model
//   TokenBitmask allowed;
//   trie->AllowedTokens(matcher, allowed);               // every step of a constrained sequence
//
// AllowedTokens walks the trie depth first against the matcher: a byte the matcher rejects
// prunes the whole subtree of tokens that start with that prefix, so a step costs about the
// number of trie nodes whose prefix is still acceptable, not the vocabulary times token length.
// The matcher's undo log (json_matcher.h) steps back up the trie; nothing is copied.
//
// Inside a string, where most of the vocabulary is allowed, walking it all would cost more than
// a tenth of a decode step. Tokens that are plain string content (no quote, backslash or control
// byte; whole UTF-8 sequences) are accepted there exactly when they fit the string's room
// (JsonMatcher::StringRoom), so they come from a precomputed set, and only the other tokens
// (a second, much smaller trie) are walked.
//
// Thread safety: a TokenTrie is immutable after construction; AllowedTokens may run concurrently
// on different matchers.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "local_engine/json_matcher.h"
#include "local_engine/tokenizer.h"

namespace kvgate::engine {

// A set of token ids, one bit each.
class TokenBitmask {
 public:
  void Reset(size_t n) { n_ = n, words_.assign((n + 63) / 64, 0); }
  void Set(size_t i) { words_[i >> 6] |= uint64_t{1} << (i & 63); }
  bool Test(size_t i) const { return (words_[i >> 6] >> (i & 63)) & 1; }
  size_t size() const { return n_; }
  size_t Count() const;
  const std::vector<uint64_t>& words() const { return words_; }

 private:
  size_t n_ = 0;
  std::vector<uint64_t> words_;
};

class TokenTrie {
 public:
  // token_bytes[id] is what token id stands for; an empty string leaves the token out (it can
  // never be allowed by the trie).
  static std::unique_ptr<TokenTrie> Build(std::span<const std::string> token_bytes);
  // Every token but control tokens (<|im_end|> and the like, which render as nothing) and those
  // with no bytes.
  static std::unique_ptr<TokenTrie> FromTokenizer(const Tokenizer& tokenizer);

  // Resets `allowed` to vocab_size() bits and sets those of the tokens whose bytes the matcher
  // accepts from its current state, all of them. The matcher is left as it was.
  void AllowedTokens(JsonMatcher& matcher, TokenBitmask& allowed) const;

  size_t vocab_size() const { return vocab_size_; }
  size_t num_nodes() const { return all_.nodes.size(); }
  size_t num_plain_tokens() const { return plain_by_length_.size(); }

 private:
  struct Node {  // in depth-first preorder
    uint8_t byte;
    uint16_t depth;     // 1 for the children of the root
    uint32_t end;       // index past this node's subtree
    uint32_t tok_begin;  // tokens[tok_begin, tok_end) end at this node
    uint32_t tok_end;
  };
  struct Trie {
    std::vector<Node> nodes;
    std::vector<int32_t> tokens;
    size_t max_depth = 0;
    // Sets the bits of the tokens of this trie the matcher accepts; leaves the matcher as it was.
    void Walk(JsonMatcher& matcher, TokenBitmask& allowed) const;
  };
  static Trie BuildTrie(std::span<const std::string> token_bytes, const std::vector<int32_t>& ids);
  TokenTrie() = default;

  // Constant after construction.
  Trie all_;            // every token
  Trie not_plain_;      // the tokens that are not plain string content
  TokenBitmask plain_;  // the plain ones
  std::vector<std::pair<uint32_t, int32_t>> plain_by_length_;  // (code points, id), sorted
  uint32_t max_plain_length_ = 0;
  size_t vocab_size_ = 0;
};

}  // namespace kvgate::engine

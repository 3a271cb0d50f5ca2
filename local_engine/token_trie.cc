#include "local_engine/token_trie.h"

#include <algorithm>
#include <bit>
#include <limits>
#include <numeric>

namespace kvgate::engine {

size_t TokenBitmask::Count() const {
  size_t n = 0;
  for (uint64_t w : words_) n += static_cast<size_t>(std::popcount(w));
  return n;
}

std::unique_ptr<TokenTrie> TokenTrie::Build(std::span<const std::string> token_bytes) {
  std::unique_ptr<TokenTrie> t(new TokenTrie());
  t->vocab_size_ = token_bytes.size();
  std::vector<int32_t> order;
  for (size_t i = 0; i < token_bytes.size(); ++i) {
    // Depth is a uint16_t; no real token comes near.
    if (!token_bytes[i].empty() && token_bytes[i].size() < std::numeric_limits<uint16_t>::max()) {
      order.push_back(static_cast<int32_t>(i));
    }
  }
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return token_bytes[a] < token_bytes[b] || (token_bytes[a] == token_bytes[b] && a < b);
  });
  std::vector<uint32_t> path;  // node index at each depth of the previous token
  const std::string* prev = nullptr;
  auto close_to = [&](size_t depth) {
    while (path.size() > depth) {
      t->nodes_[path.back()].end = static_cast<uint32_t>(t->nodes_.size());
      path.pop_back();
    }
  };
  for (int32_t id : order) {
    const std::string& s = token_bytes[id];
    size_t lcp = 0;
    if (prev != nullptr) {
      while (lcp < s.size() && lcp < prev->size() && s[lcp] == (*prev)[lcp]) ++lcp;
    }
    close_to(lcp);
    for (size_t d = lcp; d < s.size(); ++d) {
      path.push_back(static_cast<uint32_t>(t->nodes_.size()));
      t->nodes_.push_back(Node{static_cast<uint8_t>(s[d]), static_cast<uint16_t>(d + 1), 0,
                               static_cast<uint32_t>(t->tokens_.size()),
                               static_cast<uint32_t>(t->tokens_.size())});
    }
    Node& last = t->nodes_[path.back()];
    if (last.tok_begin == last.tok_end) last.tok_begin = static_cast<uint32_t>(t->tokens_.size());
    t->tokens_.push_back(id);
    last.tok_end = static_cast<uint32_t>(t->tokens_.size());
    t->max_depth_ = std::max(t->max_depth_, s.size());
    prev = &s;
  }
  close_to(0);
  return t;
}

std::unique_ptr<TokenTrie> TokenTrie::FromTokenizer(const Tokenizer& tokenizer) {
  std::vector<std::string> bytes(tokenizer.vocab_size());
  for (size_t i = 0; i < bytes.size(); ++i) {
    const int32_t id = static_cast<int32_t>(i);
    if (tokenizer.GetTokenType(id) == TokenType::kControl) continue;
    bytes[i] = tokenizer.TokenBytes(id);
  }
  return Build(bytes);
}

void TokenTrie::AllowedTokens(JsonMatcher& matcher, TokenBitmask& allowed) const {
  allowed.Reset(vocab_size_);
  // marks[d]: the matcher's undo mark after the first d bytes of the current path.
  size_t marks_storage[256];
  std::vector<size_t> marks_heap;
  size_t* marks = marks_storage;
  if (max_depth_ + 1 > std::size(marks_storage)) {
    marks_heap.resize(max_depth_ + 1);
    marks = marks_heap.data();
  }
  marks[0] = matcher.Mark();
  size_t i = 0;
  while (i < nodes_.size()) {
    const Node& n = nodes_[i];
    matcher.Rollback(marks[n.depth - 1]);
    if (!matcher.Advance(n.byte)) {
      i = n.end;
      continue;
    }
    marks[n.depth] = matcher.Mark();
    for (uint32_t k = n.tok_begin; k < n.tok_end; ++k) allowed.Set(static_cast<size_t>(tokens_[k]));
    ++i;
  }
  matcher.Rollback(marks[0]);
}

}  // namespace kvgate::engine

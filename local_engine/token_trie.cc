#include "local_engine/token_trie.h"

#include <algorithm>
#include <bit>
#include <limits>

#include "common/utf8.h"

namespace kvgate::engine {
namespace {

// The code points of `s` when it is plain JSON string content (what a string's body accepts
// byte for byte without leaving it: no quote, backslash or control byte, whole and valid UTF-8
// sequences); -1 otherwise. The same rules as JsonMatcher's string body.
int64_t PlainLength(std::string_view s) {
  int64_t n = 0;
  for (size_t i = 0; i < s.size(); ++n) {
    const auto b = static_cast<uint8_t>(s[i]);
    if (b < 0x20 || b == '"' || b == '\\') return -1;
    const size_t length = Utf8SequenceLength(s, i);  // 0: not whole, valid UTF-8
    if (length == 0) return -1;
    i += length;
  }
  return n;
}

}  // namespace

size_t TokenBitmask::Count() const {
  size_t n = 0;
  for (uint64_t w : words_) n += static_cast<size_t>(std::popcount(w));
  return n;
}

TokenTrie::Trie TokenTrie::BuildTrie(std::span<const std::string> token_bytes,
                                     const std::vector<int32_t>& ids) {
  Trie t;
  std::vector<int32_t> order = ids;
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return token_bytes[a] < token_bytes[b] || (token_bytes[a] == token_bytes[b] && a < b);
  });
  std::vector<uint32_t> path;  // node index at each depth of the previous token
  const std::string* prev = nullptr;
  auto close_to = [&](size_t depth) {
    while (path.size() > depth) {
      t.nodes[path.back()].end = static_cast<uint32_t>(t.nodes.size());
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
      path.push_back(static_cast<uint32_t>(t.nodes.size()));
      t.nodes.push_back(Node{static_cast<uint8_t>(s[d]), static_cast<uint16_t>(d + 1), 0,
                             static_cast<uint32_t>(t.tokens.size()),
                             static_cast<uint32_t>(t.tokens.size())});
    }
    Node& last = t.nodes[path.back()];
    if (last.tok_begin == last.tok_end) last.tok_begin = static_cast<uint32_t>(t.tokens.size());
    t.tokens.push_back(id);
    last.tok_end = static_cast<uint32_t>(t.tokens.size());
    t.max_depth = std::max(t.max_depth, s.size());
    prev = &s;
  }
  close_to(0);
  return t;
}

std::unique_ptr<TokenTrie> TokenTrie::Build(std::span<const std::string> token_bytes) {
  std::unique_ptr<TokenTrie> t(new TokenTrie());
  t->vocab_size_ = token_bytes.size();
  t->plain_.Reset(token_bytes.size());
  std::vector<int32_t> all, not_plain;
  for (size_t i = 0; i < token_bytes.size(); ++i) {
    // Depth is a uint16_t; no real token comes near.
    const std::string& s = token_bytes[i];
    if (s.empty() || s.size() >= std::numeric_limits<uint16_t>::max()) continue;
    const auto id = static_cast<int32_t>(i);
    all.push_back(id);
    const int64_t n = PlainLength(s);
    if (n < 0) {
      not_plain.push_back(id);
      continue;
    }
    t->plain_.Set(i);
    t->plain_by_length_.push_back({static_cast<uint32_t>(n), id});
    t->max_plain_length_ = std::max(t->max_plain_length_, static_cast<uint32_t>(n));
  }
  std::sort(t->plain_by_length_.begin(), t->plain_by_length_.end());
  t->all_ = BuildTrie(token_bytes, all);
  t->not_plain_ = BuildTrie(token_bytes, not_plain);
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

void TokenTrie::Trie::Walk(JsonMatcher& matcher, TokenBitmask& allowed) const {
  // marks[d]: the matcher's undo mark after the first d bytes of the current path.
  size_t marks_storage[256];
  std::vector<size_t> marks_heap;
  size_t* marks = marks_storage;
  if (max_depth + 1 > std::size(marks_storage)) {
    marks_heap.resize(max_depth + 1);
    marks = marks_heap.data();
  }
  marks[0] = matcher.Mark();
  size_t i = 0;
  while (i < nodes.size()) {
    const Node& n = nodes[i];
    matcher.Rollback(marks[n.depth - 1]);
    if (!matcher.Advance(n.byte)) {
      i = n.end;
      continue;
    }
    marks[n.depth] = matcher.Mark();
    for (uint32_t k = n.tok_begin; k < n.tok_end; ++k) allowed.Set(static_cast<size_t>(tokens[k]));
    ++i;
  }
  matcher.Rollback(marks[0]);
}

void TokenTrie::AllowedTokens(JsonMatcher& matcher, TokenBitmask& allowed) const {
  const int64_t room = matcher.StringRoom();
  if (room < 0) {
    allowed.Reset(vocab_size_);
    all_.Walk(matcher, allowed);
    return;
  }
  if (room >= max_plain_length_) {
    allowed = plain_;
  } else {
    allowed.Reset(vocab_size_);
    for (const auto& [length, id] : plain_by_length_) {
      if (length > room) break;
      allowed.Set(static_cast<size_t>(id));
    }
  }
  not_plain_.Walk(matcher, allowed);
}

}  // namespace kvgate::engine

// The byte-level automaton of constrained decoding: the state of one output being generated
// under a JsonGrammar (json_grammar.h).
//
//   JsonMatcher m(grammar);
//   if (m.Allows('{')) m.Advance('{');
//   m.IsComplete();   // the bytes so far are a whole value of the grammar
//
// The state is a stack of small frames (one per open value) plus an undo log: every change a
// byte makes is logged, so a caller can Mark() a point, try bytes, and Rollback() to it in time
// proportional to what changed. TokenTrie (token_trie.h) walks the vocabulary that way without
// copying the state.
//
// Thread safety: none; one matcher per sequence, used by one thread. The grammar is shared.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "local_engine/json_grammar.h"

namespace kvgate::engine {

class JsonMatcher {
 public:
  // REQUIRES: grammar != nullptr.
  explicit JsonMatcher(std::shared_ptr<const JsonGrammar> grammar);

  // Consumes byte b when the grammar allows it here; otherwise returns false and changes nothing.
  bool Advance(uint8_t b);
  // All of `bytes`, or (returning false) none of them.
  bool AdvanceBytes(std::string_view bytes);
  bool Allows(uint8_t b);  // Advance then Rollback

  // The bytes so far form a complete value: the output may end here.
  bool IsComplete() const;
  // Some byte may still follow (a complete top-level number may still grow). When IsComplete()
  // and not CanContinue(), the output is finished.
  bool CanContinue();

  // Rollback(Mark()) undoes every Advance since the Mark. Marks nest (a later mark is rolled back
  // first). Commit() forgets the undo log (call it once no mark is outstanding, e.g. after the
  // sampled token's bytes, so the log stays short).
  size_t Mark() const { return undo_.size(); }
  void Rollback(size_t mark);
  void Commit() { undo_.clear(); }

  int depth() const { return depth_; }
  // Inside a string's body (no escape or UTF-8 sequence half done): how many more code points it
  // may take (UINT32_MAX: unbounded). Any other state: -1. In such a state every byte string of
  // plain string content (no quote, backslash or control byte; whole UTF-8 sequences) of at most
  // that many code points is accepted, which lets TokenTrie skip walking those tokens.
  int64_t StringRoom() const;

 private:
  struct Frame {
    uint32_t node;  // kRootNode for the bottom frame
    uint8_t phase;
    uint8_t ws;  // whitespace bytes in the current run
    uint8_t x, y;
    uint32_t a, b, c;
  };
  struct Undo {
    int32_t index;  // frame index, or -1: `old.a` is the old depth
    Frame old;
  };
  enum class Fed { kConsumed, kRejected, kEndedBefore };
  static constexpr uint32_t kRootNode = UINT32_MAX;
  static constexpr int kMaxFrames = kMaxJsonDepth + 2;  // the root and one open scalar

  Frame& Write(int i);  // logs frame i, returns it for writing
  bool Push(uint32_t node);
  void Pop();
  void ChildDone();  // the top frame's value is complete: pop it, the parent moves on
  bool StartValue(uint32_t node, uint8_t b);
  bool Whitespace(uint8_t b);  // consumes b in the top frame when it is allowed whitespace
  Fed Feed(uint8_t b);
  Fed FeedString(uint8_t b);
  Fed FeedNumber(const JsonGrammar::Node& n, uint8_t b);
  Fed FeedLiterals(const JsonGrammar::Node& n, uint8_t b);
  Fed FeedArray(const JsonGrammar::Node& n, uint8_t b);
  Fed FeedObject(const JsonGrammar::Node& n, uint8_t b);
  Fed FeedMap(const JsonGrammar::Node& n, uint8_t b);
  Fed FeedTagged(const JsonGrammar::Node& n, uint8_t b);
  bool TopAccepting() const;  // the top frame may end here (number, literal prefix)
  // A value of `node` started now, inside the open containers, can still be finished under
  // kMaxJsonDepth (JsonGrammar::Node::min_depth).
  bool Fits(uint32_t node) const;
  // Some key of object n from property `from` on, up to the next required one, fits.
  bool AnyKeyFits(const JsonGrammar::Node& n, uint32_t from) const;

  std::shared_ptr<const JsonGrammar> grammar_;  // constant after construction
  const JsonGrammar* g_;                         // grammar_.get()
  Frame frames_[kMaxFrames];
  int depth_ = 0;
  std::vector<Undo> undo_;
};

}  // namespace kvgate::engine

#include "local_engine/json_matcher.h"

#include <algorithm>

namespace kvgate::engine {
namespace {

using Kind = JsonGrammar::Kind;

// A map's key: a string frame with no node of its own.
constexpr uint32_t kKeyNode = UINT32_MAX - 1;

constexpr uint32_t kMaxIntDigits = 18;   // integer part: fits int64
constexpr uint32_t kMaxFracDigits = 18;
constexpr uint32_t kMaxExpDigits = 2;    // e99 at most: no overflow to infinity

// Phases. Root.
enum : uint8_t { kRootValue, kRootDone };
// String.
enum : uint8_t { kStrOpen, kStrBody, kStrEscape, kStrHex, kStrUtf8 };
// Number and integer.
enum : uint8_t { kNumStart, kNumMinus, kNumZero, kNumInt, kNumDot, kNumFrac, kNumExp, kNumExpSign, kNumExpDigits };
// Array.
enum : uint8_t { kArrOpen, kArrFirst, kArrNext, kArrItem };
// Object (declared keys) and map (any keys).
// Object (declared keys) and map (any keys); a tagged object uses the first five, then
// kTagLiteral for its tag's value, and becomes the kObject that tag selects.
enum : uint8_t { kObjOpen, kObjFirstKey, kObjKeyChars, kObjColon, kObjValue, kObjNext, kObjKey, kTagLiteral };

bool IsWs(uint8_t b) { return b == ' ' || b == '\n' || b == '\t' || b == '\r'; }
bool IsDigit(uint8_t b) { return b >= '0' && b <= '9'; }
bool IsHex(uint8_t b) {
  return IsDigit(b) || (b >= 'a' && b <= 'f') || (b >= 'A' && b <= 'F');
}

// The second byte's range of a UTF-8 sequence, by code (y): overlongs and surrogates excluded.
bool InContinuationRange(uint8_t y, uint8_t b) {
  switch (y) {
    case 1: return b >= 0xA0 && b <= 0xBF;  // after E0
    case 2: return b >= 0x80 && b <= 0x9F;  // after ED
    case 3: return b >= 0x90 && b <= 0xBF;  // after F0
    case 4: return b >= 0x80 && b <= 0x8F;  // after F4
    default: return b >= 0x80 && b <= 0xBF;
  }
}

}  // namespace

JsonMatcher::JsonMatcher(std::shared_ptr<const JsonGrammar> grammar)
    : grammar_(std::move(grammar)), g_(grammar_.get()) {
  frames_[0] = Frame{kRootNode, kRootValue, 0, 0, 0, 0, 0, 0};
  depth_ = 1;
  undo_.reserve(256);
}

JsonMatcher::Frame& JsonMatcher::Write(int i) {
  undo_.push_back({i, frames_[i]});
  return frames_[i];
}

bool JsonMatcher::Push(uint32_t node) {
  if (depth_ >= kMaxFrames) return false;
  undo_.push_back({-1, Frame{0, 0, 0, 0, 0, static_cast<uint32_t>(depth_), 0, 0}});
  Frame& f = Write(depth_);
  f = Frame{node, 0, 0, 0, 0, 0, 0, 0};
  if (node != kKeyNode && g_->nodes[node].kind == Kind::kLiterals) {
    f.b = static_cast<uint32_t>(g_->nodes[node].literals.size());
  }
  ++depth_;
  return true;
}

void JsonMatcher::Pop() {
  undo_.push_back({-1, Frame{0, 0, 0, 0, 0, static_cast<uint32_t>(depth_), 0, 0}});
  --depth_;
}

void JsonMatcher::Rollback(size_t mark) {
  while (undo_.size() > mark) {
    const Undo& u = undo_.back();
    if (u.index < 0) {
      depth_ = static_cast<int>(u.old.a);
    } else {
      frames_[u.index] = u.old;
    }
    undo_.pop_back();
  }
}

void JsonMatcher::ChildDone() {
  Pop();
  Frame& p = Write(depth_ - 1);
  p.ws = 0;
  if (p.node == kRootNode) {
    p.phase = kRootDone;
    return;
  }
  switch (g_->nodes[p.node].kind) {
    case Kind::kArray:
      ++p.a;
      p.phase = kArrNext;
      break;
    case Kind::kObject: p.phase = kObjNext; break;
    case Kind::kMap: p.phase = p.phase == kObjValue ? kObjNext : kObjColon; break;
    default: break;  // scalars have no children
  }
}

bool JsonMatcher::Fits(uint32_t node) const {
  // The frames below the top are the root and open containers; min_depth counts this value's own.
  const auto open = static_cast<uint32_t>(depth_ - 1);
  return g_->nodes[node].min_depth <= static_cast<uint32_t>(kMaxJsonDepth) - open;
}

bool JsonMatcher::AnyKeyFits(const JsonGrammar::Node& n, uint32_t from) const {
  const auto np = static_cast<uint32_t>(n.props.size());
  for (uint32_t j = from; j < np && j <= n.next_required[from]; ++j) {
    if (Fits(n.props[j].node)) return true;
  }
  return false;
}

bool JsonMatcher::StartValue(uint32_t node, uint8_t b) {
  while (g_->nodes[node].kind == Kind::kUnion) {
    node = g_->dispatch_tables[g_->nodes[node].dispatch][b];
    if (node == JsonGrammar::kNoNode) return false;
  }
  // Only a value that can be finished under the depth bound (a container leaves room above it
  // for one scalar): an alternative, key or item that could not be is never begun, so the
  // output can always be completed.
  if (!Fits(node)) return false;
  Write(depth_ - 1).ws = 0;
  return Push(node);
}

bool JsonMatcher::Whitespace(uint8_t b) {
  if (!IsWs(b)) return false;
  Frame& f = frames_[depth_ - 1];
  if (f.ws >= g_->options.max_whitespace) return false;
  if (f.node == kRootNode ? g_->compact_root : f.node != kKeyNode && g_->nodes[f.node].compact) {
    return false;
  }
  Write(depth_ - 1).ws = static_cast<uint8_t>(f.ws + 1);
  return true;
}

JsonMatcher::Fed JsonMatcher::FeedString(uint8_t b) {
  Frame& f = frames_[depth_ - 1];
  // f.c counts code points (an escape is one); a map key has no bounds.
  uint32_t min_len = 0, max_len = UINT32_MAX;
  if (f.node != kKeyNode) min_len = g_->nodes[f.node].min_items, max_len = g_->nodes[f.node].max_items;
  if (f.phase == kStrBody && b != '"' && b >= 0x20) {
    if (f.c >= max_len) return Fed::kRejected;
    if (b < 0x80 || (b >= 0xC2 && b <= 0xF4)) ++Write(depth_ - 1).c;  // a new code point
  }
  switch (f.phase) {
    case kStrOpen:
      if (b != '"') return Fed::kRejected;
      Write(depth_ - 1).phase = kStrBody;
      return Fed::kConsumed;
    case kStrBody:
      if (b == '"') {
        if (f.c < min_len) return Fed::kRejected;
        ChildDone();
        return Fed::kConsumed;
      }
      if (b == '\\') {
        Write(depth_ - 1).phase = kStrEscape;
        return Fed::kConsumed;
      }
      if (b < 0x20) return Fed::kRejected;
      if (b < 0x80) return Fed::kConsumed;
      {
        uint8_t more = 0, range = 0;
        if (b >= 0xC2 && b <= 0xDF) {
          more = 1;
        } else if (b >= 0xE0 && b <= 0xEF) {
          more = 2;
          range = b == 0xE0 ? 1 : b == 0xED ? 2 : 0;
        } else if (b >= 0xF0 && b <= 0xF4) {
          more = 3;
          range = b == 0xF0 ? 3 : b == 0xF4 ? 4 : 0;
        } else {
          return Fed::kRejected;
        }
        Frame& w = Write(depth_ - 1);
        w.phase = kStrUtf8;
        w.x = more;
        w.y = range;
      }
      return Fed::kConsumed;
    case kStrUtf8: {
      if (!InContinuationRange(f.y, b)) return Fed::kRejected;
      Frame& w = Write(depth_ - 1);
      w.y = 0;
      if (--w.x == 0) w.phase = kStrBody;
      return Fed::kConsumed;
    }
    case kStrEscape: {
      static constexpr std::string_view kSimple = "\"\\/bfnrt";
      if (kSimple.find(static_cast<char>(b)) != std::string_view::npos) {
        Write(depth_ - 1).phase = kStrBody;
        return Fed::kConsumed;
      }
      if (b != 'u') return Fed::kRejected;
      Frame& w = Write(depth_ - 1);
      w.phase = kStrHex;
      w.a = 4;
      w.x = 0;
      return Fed::kConsumed;
    }
    case kStrHex: {
      if (!IsHex(b)) return Fed::kRejected;
      // No UTF-16 surrogates (D800-DFFF): alone they are invalid, and pairs are not needed.
      if (f.a == 3 && f.x == 1 && !(b >= '0' && b <= '7')) return Fed::kRejected;
      Frame& w = Write(depth_ - 1);
      if (w.a == 4) w.x = (b == 'd' || b == 'D') ? 1 : 0;
      if (--w.a == 0) w.phase = kStrBody;
      return Fed::kConsumed;
    }
  }
  return Fed::kRejected;
}

JsonMatcher::Fed JsonMatcher::FeedNumber(const JsonGrammar::Node& n, uint8_t b) {
  const bool integer = n.kind == Kind::kInteger;
  const Frame& f = frames_[depth_ - 1];
  auto go = [&](uint8_t phase, uint32_t digits) {
    Frame& w = Write(depth_ - 1);
    w.phase = phase;
    w.c = digits;
    return Fed::kConsumed;
  };
  const bool exp = !integer && (b == 'e' || b == 'E');
  switch (f.phase) {
    case kNumStart:
      if (b == '-') return go(kNumMinus, 0);
      [[fallthrough]];
    case kNumMinus:
      if (b == '0') return go(kNumZero, 0);
      if (b >= '1' && b <= '9') return go(kNumInt, 1);
      return Fed::kRejected;
    case kNumZero:
    case kNumInt:
      if (f.phase == kNumInt && IsDigit(b) && f.c < kMaxIntDigits) return go(kNumInt, f.c + 1);
      if (!integer && b == '.') return go(kNumDot, 0);
      if (exp) return go(kNumExp, 0);
      return Fed::kEndedBefore;
    case kNumDot:
      if (IsDigit(b)) return go(kNumFrac, 1);
      return Fed::kRejected;
    case kNumFrac:
      if (IsDigit(b) && f.c < kMaxFracDigits) return go(kNumFrac, f.c + 1);
      if (exp) return go(kNumExp, 0);
      return Fed::kEndedBefore;
    case kNumExp:
      if (b == '+' || b == '-') return go(kNumExpSign, 0);
      [[fallthrough]];
    case kNumExpSign:
      if (IsDigit(b)) return go(kNumExpDigits, 1);
      return Fed::kRejected;
    case kNumExpDigits:
      if (IsDigit(b) && f.c < kMaxExpDigits) return go(kNumExpDigits, f.c + 1);
      return Fed::kEndedBefore;
  }
  return Fed::kRejected;
}

JsonMatcher::Fed JsonMatcher::FeedLiterals(const JsonGrammar::Node& n, uint8_t b) {
  const Frame& f = frames_[depth_ - 1];
  const auto& lits = n.literals;
  const uint32_t pos = f.c;
  uint32_t lo = f.a;
  while (lo < f.b && !(lits[lo].size() > pos && static_cast<uint8_t>(lits[lo][pos]) == b)) ++lo;
  if (lo == f.b) return lits[f.a].size() == pos && pos > 0 ? Fed::kEndedBefore : Fed::kRejected;
  uint32_t hi = lo + 1;
  while (hi < f.b && lits[hi].size() > pos && static_cast<uint8_t>(lits[hi][pos]) == b) ++hi;
  Frame& w = Write(depth_ - 1);
  w.a = lo;
  w.b = hi;
  w.c = pos + 1;
  if (hi - lo == 1 && lits[lo].size() == pos + 1) ChildDone();
  return Fed::kConsumed;
}

JsonMatcher::Fed JsonMatcher::FeedArray(const JsonGrammar::Node& n, uint8_t b) {
  const Frame& f = frames_[depth_ - 1];
  switch (f.phase) {
    case kArrOpen:
      if (b != '[') return Fed::kRejected;
      Write(depth_ - 1).phase = kArrFirst;
      return Fed::kConsumed;
    case kArrFirst:
      if (Whitespace(b)) return Fed::kConsumed;
      if (b == ']' && n.min_items == 0) return ChildDone(), Fed::kConsumed;
      if (n.max_items == 0) return Fed::kRejected;
      return StartValue(n.value_node, b) ? Fed::kEndedBefore : Fed::kRejected;
    case kArrNext:
      if (Whitespace(b)) return Fed::kConsumed;
      if (b == ',' && f.a < n.max_items && Fits(n.value_node)) {
        Frame& w = Write(depth_ - 1);
        w.phase = kArrItem;
        w.ws = 0;
        return Fed::kConsumed;
      }
      if (b == ']' && f.a >= n.min_items) return ChildDone(), Fed::kConsumed;
      return Fed::kRejected;
    case kArrItem:
      if (Whitespace(b)) return Fed::kConsumed;
      return StartValue(n.value_node, b) ? Fed::kEndedBefore : Fed::kRejected;
  }
  return Fed::kRejected;
}

JsonMatcher::Fed JsonMatcher::FeedObject(const JsonGrammar::Node& n, uint8_t b) {
  const Frame& f = frames_[depth_ - 1];
  const uint32_t np = static_cast<uint32_t>(n.props.size());
  auto begin_key = [&] {
    Frame& w = Write(depth_ - 1);
    w.phase = kObjKeyChars;
    w.b = w.a;
    w.c = 0;
    return Fed::kConsumed;
  };
  switch (f.phase) {
    case kObjOpen:
      if (b != '{') return Fed::kRejected;
      Write(depth_ - 1).phase = kObjFirstKey;
      return Fed::kConsumed;
    case kObjFirstKey:
      if (Whitespace(b)) return Fed::kConsumed;
      if (b == '}' && n.next_required[0] == np && n.min_props == 0) {
        return ChildDone(), Fed::kConsumed;
      }
      if (b == '"' && np > 0 && n.max_props > 0 && AnyKeyFits(n, 0)) return begin_key();
      return Fed::kRejected;
    case kObjKeyChars: {
      // Candidates: the properties from the next index up to the first required one.
      const uint32_t last = std::min(n.next_required[f.a], np - 1);
      const std::string& prefix = n.props[f.b].key;
      const uint32_t pos = f.c;
      for (uint32_t j = f.b; j <= last; ++j) {
        const std::string& key = n.props[j].key;
        if (key.size() < pos || key.compare(0, pos, prefix, 0, pos) != 0) continue;
        if (!Fits(n.props[j].node)) continue;  // an optional key whose value would be too deep
        if (b == '"' && key.size() == pos) {
          Frame& w = Write(depth_ - 1);
          w.phase = kObjColon;
          w.ws = 0;
          w.b = j;
          w.a = j + 1;
          if (w.x < UINT8_MAX) ++w.x;  // keys so far (saturating: max_props above it is no bound)
          return Fed::kConsumed;
        }
        if (key.size() > pos && static_cast<uint8_t>(key[pos]) == b) {
          Frame& w = Write(depth_ - 1);
          w.b = j;
          w.c = pos + 1;
          return Fed::kConsumed;
        }
      }
      return Fed::kRejected;
    }
    case kObjColon:
      if (Whitespace(b)) return Fed::kConsumed;
      if (b != ':') return Fed::kRejected;
      {
        Frame& w = Write(depth_ - 1);
        w.phase = kObjValue;
        w.ws = 0;
      }
      return Fed::kConsumed;
    case kObjValue:
      if (Whitespace(b)) return Fed::kConsumed;
      return StartValue(n.props[f.b].node, b) ? Fed::kEndedBefore : Fed::kRejected;
    case kObjNext:
      if (Whitespace(b)) return Fed::kConsumed;
      if (b == ',' && f.a < np && (n.max_props >= UINT8_MAX || f.x < n.max_props) &&
          AnyKeyFits(n, f.a)) {
        Frame& w = Write(depth_ - 1);
        w.phase = kObjKey;
        w.ws = 0;
        return Fed::kConsumed;
      }
      if (b == '}' && n.next_required[f.a] == np && f.x >= std::min<uint32_t>(n.min_props, UINT8_MAX)) {
        return ChildDone(), Fed::kConsumed;
      }
      return Fed::kRejected;
    case kObjKey:
      if (Whitespace(b)) return Fed::kConsumed;
      if (b == '"') return begin_key();
      return Fed::kRejected;
  }
  return Fed::kRejected;
}

JsonMatcher::Fed JsonMatcher::FeedTagged(const JsonGrammar::Node& n, uint8_t b) {
  const Frame& f = frames_[depth_ - 1];
  switch (f.phase) {
    case kObjOpen:
      if (b != '{') return Fed::kRejected;
      Write(depth_ - 1).phase = kObjFirstKey;
      return Fed::kConsumed;
    case kObjFirstKey:
      if (Whitespace(b)) return Fed::kConsumed;
      if (b != '"') return Fed::kRejected;
      {
        Frame& w = Write(depth_ - 1);
        w.phase = kObjKeyChars;
        w.c = 0;
      }
      return Fed::kConsumed;
    case kObjKeyChars:
      if (f.c < n.tag_key.size()) {
        if (static_cast<uint8_t>(n.tag_key[f.c]) != b) return Fed::kRejected;
        ++Write(depth_ - 1).c;
        return Fed::kConsumed;
      }
      if (b != '"') return Fed::kRejected;
      {
        Frame& w = Write(depth_ - 1);
        w.phase = kObjColon;
        w.ws = 0;
      }
      return Fed::kConsumed;
    case kObjColon:
      if (Whitespace(b)) return Fed::kConsumed;
      if (b != ':') return Fed::kRejected;
      {
        Frame& w = Write(depth_ - 1);
        w.phase = kObjValue;
        w.ws = 0;
      }
      return Fed::kConsumed;
    case kObjValue:
    case kTagLiteral: {
      if (f.phase == kObjValue && Whitespace(b)) return Fed::kConsumed;
      // As FeedLiterals: [a, b) the literals that match the c bytes so far.
      const auto& lits = n.literals;
      const bool first = f.phase == kObjValue;
      const uint32_t pos = first ? 0 : f.c;
      const uint32_t end = first ? static_cast<uint32_t>(lits.size()) : f.b;
      uint32_t lo = first ? 0 : f.a;
      while (lo < end && !(lits[lo].size() > pos && static_cast<uint8_t>(lits[lo][pos]) == b)) ++lo;
      if (lo == end) return Fed::kRejected;
      uint32_t hi = lo + 1;
      while (hi < end && lits[hi].size() > pos && static_cast<uint8_t>(lits[hi][pos]) == b) ++hi;
      Frame& w = Write(depth_ - 1);
      if (hi - lo == 1 && lits[lo].size() == pos + 1) {
        // The tag is written (a JSON string, so no literal is a prefix of another): from here on
        // this is the object it selects, past its first key.
        w = Frame{n.tag_alts[lo], kObjNext, 0, 1, 0, 1, 0, 0};
        return Fed::kConsumed;
      }
      w.phase = kTagLiteral;
      w.a = lo;
      w.b = hi;
      w.c = pos + 1;
      return Fed::kConsumed;
    }
  }
  return Fed::kRejected;
}

JsonMatcher::Fed JsonMatcher::FeedMap(const JsonGrammar::Node& n, uint8_t b) {
  const Frame& f = frames_[depth_ - 1];
  switch (f.phase) {
    case kObjOpen:
      if (b != '{') return Fed::kRejected;
      Write(depth_ - 1).phase = kObjFirstKey;
      return Fed::kConsumed;
    case kObjFirstKey:
    case kObjKey:
      if (Whitespace(b)) return Fed::kConsumed;
      if (b == '}' && f.phase == kObjFirstKey) return ChildDone(), Fed::kConsumed;
      if (b != '"' || !Fits(n.value_node)) return Fed::kRejected;
      Write(depth_ - 1).ws = 0;
      return Push(kKeyNode) ? Fed::kEndedBefore : Fed::kRejected;
    case kObjColon:
      if (Whitespace(b)) return Fed::kConsumed;
      if (b != ':') return Fed::kRejected;
      {
        Frame& w = Write(depth_ - 1);
        w.phase = kObjValue;
        w.ws = 0;
      }
      return Fed::kConsumed;
    case kObjValue:
      if (Whitespace(b)) return Fed::kConsumed;
      return StartValue(n.value_node, b) ? Fed::kEndedBefore : Fed::kRejected;
    case kObjNext:
      if (Whitespace(b)) return Fed::kConsumed;
      if (b == ',' && Fits(n.value_node)) {
        Frame& w = Write(depth_ - 1);
        w.phase = kObjKey;
        w.ws = 0;
        return Fed::kConsumed;
      }
      if (b == '}') return ChildDone(), Fed::kConsumed;
      return Fed::kRejected;
  }
  return Fed::kRejected;
}

JsonMatcher::Fed JsonMatcher::Feed(uint8_t b) {
  const Frame& f = frames_[depth_ - 1];
  if (f.node == kRootNode) {
    if (f.phase != kRootValue) return Fed::kRejected;
    if (Whitespace(b)) return Fed::kConsumed;
    return StartValue(g_->root, b) ? Fed::kEndedBefore : Fed::kRejected;
  }
  if (f.node == kKeyNode) return FeedString(b);
  const JsonGrammar::Node& n = g_->nodes[f.node];
  switch (n.kind) {
    case Kind::kString: return FeedString(b);
    case Kind::kNumber:
    case Kind::kInteger: return FeedNumber(n, b);
    case Kind::kLiterals: return FeedLiterals(n, b);
    case Kind::kArray: return FeedArray(n, b);
    case Kind::kObject: return FeedObject(n, b);
    case Kind::kMap: return FeedMap(n, b);
    case Kind::kTagged: return FeedTagged(n, b);
    case Kind::kUnion: return Fed::kRejected;  // resolved by StartValue
  }
  return Fed::kRejected;
}

bool JsonMatcher::Advance(uint8_t b) {
  const size_t mark = Mark();
  // kEndedBefore: either a new value was pushed and takes b, or the top value (a number, a
  // literal that could go on) ended before b and its parent takes b. Each pass pushes or pops a
  // frame, so a byte settles within a bounded number of passes.
  for (int pass = 0; pass < 2 * kMaxFrames + 2; ++pass) {
    const int depth_before = depth_;
    const Fed r = Feed(b);
    if (r == Fed::kConsumed) return true;
    if (r == Fed::kRejected) break;
    if (depth_ == depth_before) ChildDone();  // ended before b, nothing pushed
  }
  Rollback(mark);
  return false;
}

bool JsonMatcher::AdvanceBytes(std::string_view bytes) {
  const size_t mark = Mark();
  for (char c : bytes) {
    if (!Advance(static_cast<uint8_t>(c))) {
      Rollback(mark);
      return false;
    }
  }
  return true;
}

bool JsonMatcher::Allows(uint8_t b) {
  const size_t mark = Mark();
  const bool ok = Advance(b);
  Rollback(mark);
  return ok;
}

bool JsonMatcher::TopAccepting() const {
  const Frame& f = frames_[depth_ - 1];
  if (f.node == kRootNode || f.node == kKeyNode) return false;
  const JsonGrammar::Node& n = g_->nodes[f.node];
  switch (n.kind) {
    case Kind::kNumber:
    case Kind::kInteger:
      return f.phase == kNumZero || f.phase == kNumInt || f.phase == kNumFrac ||
             f.phase == kNumExpDigits;
    case Kind::kLiterals: return f.c > 0 && n.literals[f.a].size() == f.c;
    default: return false;
  }
}

int64_t JsonMatcher::StringRoom() const {
  const Frame& f = frames_[depth_ - 1];
  if (f.node == kRootNode || f.phase != kStrBody) return -1;
  if (f.node == kKeyNode) return UINT32_MAX;
  const JsonGrammar::Node& n = g_->nodes[f.node];
  if (n.kind != Kind::kString) return -1;
  return n.max_items == UINT32_MAX ? int64_t{UINT32_MAX} : int64_t{n.max_items} - f.c;
}

bool JsonMatcher::IsComplete() const {
  if (depth_ == 1) return frames_[0].phase == kRootDone;
  return depth_ == 2 && TopAccepting();
}

bool JsonMatcher::CanContinue() {
  for (int b = 0; b < 256; ++b) {
    if (Allows(static_cast<uint8_t>(b))) return true;
  }
  return false;
}

}  // namespace kvgate::engine

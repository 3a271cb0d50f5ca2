#include "telemetry/prompt_excerpt.h"

#include <algorithm>
#include <array>

#include "common/utf8.h"
#include "telemetry/diagnosis.h"

namespace kvgate::telemetry {
namespace {

bool IsContinuation(char c) { return (static_cast<unsigned char>(c) & 0xC0) == 0x80; }

bool IsAlnum(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

// A character an API key or a bearer token is made of.
bool IsTokenChar(char c) { return IsAlnum(c) || c == '-' || c == '_' || c == '.' || c == '~'; }

// The longest prefix of `text` no longer than `max_bytes` that ends at a character boundary.
size_t CutAtCharacter(std::string_view text, size_t max_bytes) {
  if (text.size() <= max_bytes) return text.size();
  size_t end = max_bytes;
  while (end > 0 && IsContinuation(text[end])) --end;
  return end;
}

// Replaces [begin, end) of `text` by the marker; returns where scanning goes on.
size_t Mark(std::string& text, size_t begin, size_t end) {
  text.replace(begin, end - begin, SecretRedactor::kMarker);
  return begin + SecretRedactor::kMarker.size();
}

// Credentials by their shape, whoever they belong to: the prefixes providers and code hosts put
// on their keys, each followed by enough key characters that ordinary words do not match.
struct KeyShape {
  std::string_view prefix;
  size_t min_rest;
};
constexpr std::array kKeyShapes = {
    KeyShape{"sk-", 16},      KeyShape{"sk_live_", 16}, KeyShape{"sk_test_", 16},
    KeyShape{"rk_live_", 16}, KeyShape{"pk_live_", 16}, KeyShape{"AKIA", 16},
    KeyShape{"ASIA", 16},     KeyShape{"AIza", 30},     KeyShape{"ghp_", 20},
    KeyShape{"gho_", 20},     KeyShape{"ghs_", 20},     KeyShape{"github_pat_", 20},
    KeyShape{"glpat-", 16},   KeyShape{"xoxb-", 10},    KeyShape{"xoxp-", 10},
    KeyShape{"hf_", 20},
};

void RedactKeyShapes(std::string& text) {
  for (size_t i = 0; i < text.size();) {
    if ((i > 0 && IsTokenChar(text[i - 1])) ||
        std::string_view("srpAgxh").find(text[i]) == std::string_view::npos) {
      ++i;
      continue;
    }
    size_t end = i;
    for (const KeyShape& shape : kKeyShapes) {
      if (std::string_view(text).substr(i, shape.prefix.size()) != shape.prefix) continue;
      size_t j = i + shape.prefix.size();
      while (j < text.size() && IsTokenChar(text[j])) ++j;
      if (j - i - shape.prefix.size() >= shape.min_rest) end = j;
      break;
    }
    i = end > i ? Mark(text, i, end) : i + 1;
  }
}

// "Bearer <token>" (any case), the way credentials are pasted from a curl command or a header.
void RedactBearerTokens(std::string& text) {
  constexpr std::string_view kBearer = "bearer ";
  constexpr size_t kMinToken = 8;
  for (size_t i = 0; i + kBearer.size() < text.size();) {
    bool match = i == 0 || !IsAlnum(text[i - 1]);
    for (size_t k = 0; match && k < kBearer.size(); ++k) {
      match = static_cast<char>(text[i + k] | 0x20) == kBearer[k];
    }
    if (!match) {
      ++i;
      continue;
    }
    size_t j = i + kBearer.size();
    const size_t token = j;
    while (j < text.size() &&
           (IsTokenChar(text[j]) || text[j] == '+' || text[j] == '/' || text[j] == '=')) {
      ++j;
    }
    i = j - token >= kMinToken ? Mark(text, token, j) : j;
  }
}

// [begin, end) of `text` around byte `at`: up to kExcerptChars characters before and after it,
// on character boundaries.
std::string Window(std::string_view text, size_t at) {
  at = std::min(at, text.size());
  while (at > 0 && at < text.size() && IsContinuation(text[at])) --at;
  size_t begin = at;
  for (size_t n = 0; begin > 0 && n < kExcerptChars; ++n) {
    --begin;
    while (begin > 0 && IsContinuation(text[begin])) --begin;
  }
  size_t end = at;
  for (size_t n = 0; end < text.size() && n < kExcerptChars; ++n) {
    ++end;
    while (end < text.size() && IsContinuation(text[end])) ++end;
  }
  return ToValidUtf8(text.substr(begin, end - begin));
}

}  // namespace

size_t PromptTexts::Bytes() const {
  size_t n = 0;
  for (const ElementText& e : elements) n += std::min(e.text.size(), e.bound);
  return n;
}

void RedactPromptText(std::string& text, const SecretRedactor& redactor) {
  if (!redactor.empty()) redactor.RedactInPlace(text);
  RedactKeyShapes(text);
  RedactBearerTokens(text);
}

PromptTexts CapturePromptTexts(const raw_json::Object& body, const SecretRedactor& redactor,
                               PromptTextBounds bounds) {
  PromptTexts texts;
  texts.redactor = &redactor;
  size_t left = bounds.total_bytes;
  std::string bytes;
  ForEachPromptElement(body, [&](FingerprintElement::Kind, int, raw_json::Value value) {
    if (left == 0) return;
    bytes.clear();
    AppendPromptBytes(value, bytes);
    ElementText e;
    e.bound = std::min(bounds.element_bytes, left);
    const size_t cut = CutAtCharacter(bytes, e.bound + kRedactionMargin);
    e.text.assign(bytes, 0, cut);
    e.complete = cut == bytes.size();
    left -= std::min(e.bound, e.text.size());
    texts.elements.push_back(std::move(e));
  });
  return texts;
}

namespace {

// An element's text as an excerpt may show it: secrets out, then cut to its bound (redacting
// first, so that a secret the bound would cut in half is still recognized).
ElementText Shown(const ElementText& kept, const SecretRedactor* redactor) {
  static const SecretRedactor kNone;
  ElementText out{.text = kept.text, .complete = kept.complete, .bound = kept.bound};
  RedactPromptText(out.text, redactor != nullptr ? *redactor : kNone);
  const size_t keep = CutAtCharacter(out.text, kept.bound);
  if (keep < out.text.size()) {
    out.text.resize(keep);
    out.complete = false;
  }
  return out;
}

}  // namespace

std::optional<Excerpt> ExcerptAt(const PromptTexts* previous, const PromptTexts* current,
                                 size_t element) {
  if (previous == nullptr || current == nullptr) return std::nullopt;  // no text kept at all
  // An element past a turn's total bound was not kept: without both sides the changed byte is
  // unknown, and text shown from a guessed place would be invented.
  if (element >= previous->elements.size() || element >= current->elements.size()) {
    return Excerpt{.beyond_kept = true};
  }
  const ElementText p = Shown(previous->elements[element], previous->redactor);
  const ElementText c = Shown(current->elements[element], current->redactor);
  const std::string_view a = p.text, b = c.text;
  const size_t shorter = std::min(a.size(), b.size());
  const size_t at = static_cast<size_t>(
      std::mismatch(a.begin(), a.begin() + static_cast<ptrdiff_t>(shorter), b.begin()).first -
      a.begin());
  if (at == shorter) {
    // Equal as far as both were kept. Equal whole texts: the change was inside a redacted
    // secret. Otherwise the change is where the shorter one ends only when that is the end of
    // its element; else it lies past what was kept.
    if (a.size() == b.size()) {
      if (p.complete && c.complete) return std::nullopt;
      return Excerpt{.beyond_kept = true};
    }
    const bool ends_there = a.size() < b.size() ? p.complete : c.complete;
    if (!ends_there) return Excerpt{.beyond_kept = true};
  }
  return Excerpt{.before = Window(a, at), .after = Window(b, at)};
}

}  // namespace kvgate::telemetry

// The text behind a prompt_changed diagnosis: what a thread's previous turn said where this turn's
// prompt first differs, shown as a short excerpt of both.
//
// The fingerprint (diagnosis.h) knows where a prompt changed, to 64 bytes, without any text. To
// show *what* changed, the tracker keeps, per live thread, the previous turn's text of each prompt
// element, bounded. Secrets are taken out when an excerpt is made, from the two texts it is made
// of: redacting every turn's text as it is kept cost more than the rest of the request path
// (about 250,000 instructions for a 1.2 KB prompt), and excerpts are rare. Until then the text is
// held as the request body itself was, in this process's memory only. Nothing here runs for a
// request without a thread, nor when excerpts are turned off (`diagnosis: {excerpts: false}`).
//
// Pure logic: no I/O.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/raw_json.h"
#include "common/redact.h"

namespace kvgate::telemetry {

// What one thread keeps of its previous turn's text. The bounds trade memory for reach: the
// changes worth showing (a timestamp, a request id, a counter in a system prompt, a reordered
// tool) sit near the start of the prompt's first elements, and the tracker holds up to
// ThreadTrackerOptions::max_threads threads (10,000 by default: at most 160 MiB of text at these
// bounds, a few KB per thread in practice). A change past what was kept gets no `before` text.
struct PromptTextBounds {
  size_t element_bytes = 4096;  // the first bytes of each element's minified JSON
  size_t total_bytes = 16384;   // all elements of one turn together, in prompt order
};

// One element's kept text: the start of its minified JSON (the bytes the fingerprint hashes),
// cut at a UTF-8 character boundary, with a margin past the bound (kRedactionMargin) so that a
// secret the bound would cut in half is still recognized when the excerpt is redacted.
struct ElementText {
  std::string text;
  bool complete = false;  // `text` is the whole element (nothing was cut off)
  size_t bound = 0;       // the bytes an excerpt may show of it, once redacted
};
inline constexpr size_t kRedactionMargin = 256;

// A turn's kept text, element for element in fingerprint order (Fingerprint's elements[i] is
// elements[i] here); elements past the total bound are absent.
struct PromptTexts {
  std::vector<ElementText> elements;
  // Redacts an excerpt's texts (the provider keys it knows); must outlive this. Never null.
  const SecretRedactor* redactor = nullptr;
  size_t Bytes() const;  // the bytes excerpts may show (each element up to its bound)
};

// Takes out what must not be kept: every form of the secrets `redactor` knows (the provider keys,
// as kvgate's logs do), plus anything shaped like a credential (a bearer token, an API key with a
// well-known prefix: sk-, sk-ant-, AKIA, AIza, ghp_, xoxb-, ...).
void RedactPromptText(std::string& text, const SecretRedactor& redactor);

// The kept text of a request body's prompt (the elements Fingerprint hashes).
PromptTexts CapturePromptTexts(const raw_json::Object& request_body, const SecretRedactor& redactor,
                               PromptTextBounds bounds = {});

// A short window of an element's text around its first changed byte: up to kExcerptChars
// characters either side, never cutting a multi-byte character.
struct Excerpt {
  std::optional<std::string> before;  // the previous turn's text; nullopt when it was not kept
  std::optional<std::string> after;   // this turn's text; nullopt when it was not kept
  // The previous turn's element was kept only in part and the change lies past its end.
  bool beyond_kept = false;
};
inline constexpr size_t kExcerptChars = 60;

// The excerpt of element `element` of two consecutive turns' texts; nullopt when neither kept
// it, or when the kept texts do not differ (the change was inside a redacted secret).
std::optional<Excerpt> ExcerptAt(const PromptTexts* previous, const PromptTexts* current,
                                 size_t element);

}  // namespace kvgate::telemetry

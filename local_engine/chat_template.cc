#include "local_engine/chat_template.h"

namespace kvgate::engine {
namespace {

constexpr std::string_view kImStartSystem = "<|im_start|>system\n";
constexpr std::string_view kImEnd = "<|im_end|>";

// The default system message of a ChatML template: the first "<|im_start|>system\n...<|im_end|>"
// whose body is plain text (not Jinja code such as "' + messages[0]['content'] + '"). Templates
// spell the newline either as a real newline or as the escape "\n" inside a Jinja string literal.
std::string FindDefaultSystem(std::string_view jinja) {
  constexpr std::string_view kHeader = "<|im_start|>system";
  size_t at = 0;
  while ((at = jinja.find(kHeader, at)) != std::string_view::npos) {
    at += kHeader.size();
    if (jinja.substr(at).starts_with("\\n")) {
      at += 2;
    } else if (jinja.substr(at).starts_with("\n")) {
      at += 1;
    } else {
      continue;
    }
    const size_t end = jinja.find(kImEnd, at);
    if (end == std::string_view::npos) break;
    const std::string_view body = jinja.substr(at, end - at);
    if (body.empty() || body.find_first_of("'\"{}") != std::string_view::npos) continue;
    std::string text;
    for (size_t i = 0; i < body.size(); ++i) {
      if (body[i] == '\\' && i + 1 < body.size() && (body[i + 1] == 'n' || body[i + 1] == '\\')) {
        text += body[++i] == 'n' ? '\n' : '\\';
      } else {
        text += body[i];
      }
    }
    return text;
  }
  return {};
}

// Jinja's `trim` is Python's str.strip(): Unicode whitespace at both ends.
size_t WhitespaceLengthAt(std::string_view s, size_t i, bool backwards) {
  static constexpr std::string_view kMultiByte[] = {
      "\xC2\x85",     "\xC2\xA0",     "\xE1\x9A\x80", "\xE2\x80\x80", "\xE2\x80\x81",
      "\xE2\x80\x82", "\xE2\x80\x83", "\xE2\x80\x84", "\xE2\x80\x85", "\xE2\x80\x86",
      "\xE2\x80\x87", "\xE2\x80\x88", "\xE2\x80\x89", "\xE2\x80\x8A", "\xE2\x80\xA8",
      "\xE2\x80\xA9", "\xE2\x80\xAF", "\xE2\x81\x9F", "\xE3\x80\x80"};
  const unsigned char c = static_cast<unsigned char>(backwards ? s[i - 1] : s[i]);
  if (c == ' ' || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F)) return 1;
  for (std::string_view ws : kMultiByte) {
    if (backwards ? s.substr(0, i).ends_with(ws) : s.substr(i).starts_with(ws)) return ws.size();
  }
  return 0;
}

std::string_view Trim(std::string_view s) {
  size_t b = 0;
  while (b < s.size()) {
    const size_t n = WhitespaceLengthAt(s, b, false);
    if (n == 0) break;
    b += n;
  }
  size_t e = s.size();
  while (e > b) {
    const size_t n = WhitespaceLengthAt(s, e, true);
    if (n == 0) break;
    e -= n;
  }
  return s.substr(b, e - b);
}

}  // namespace

Result<ChatTemplate> ChatTemplateFromJinja(std::string_view jinja) {
  if (jinja.find("<|im_start|>") != std::string_view::npos) {
    return ChatTemplate{ChatTemplateKind::kChatMl, FindDefaultSystem(jinja)};
  }
  if (jinja.find("<|start_header_id|>") != std::string_view::npos) {
    if (jinja.find("Cutting Knowledge Date") != std::string_view::npos) {
      return MakeError(ErrorCode::kInvalidArgument,
                       "Llama 3.1+ chat template (date/tools system header) is not supported");
    }
    return ChatTemplate{ChatTemplateKind::kLlama3, {}};
  }
  return MakeError(ErrorCode::kInvalidArgument,
                   "unsupported chat template (kvgate renders ChatML and Llama 3 only)");
}

Result<ChatTemplate> ChatTemplateFromGguf(const GgufFile& file) {
  const auto jinja = file.GetString("tokenizer.chat_template");
  if (!jinja) {
    return MakeError(ErrorCode::kNotFound, file.path() + ": no tokenizer.chat_template");
  }
  auto t = ChatTemplateFromJinja(*jinja);
  if (!t) return MakeError(t.error().code, file.path() + ": " + t.error().message);
  return t;
}

Result<std::string> ApplyChatTemplate(const ChatTemplate& tmpl,
                                      const std::vector<ChatMessage>& messages,
                                      bool add_generation_prompt) {
  size_t total = 64;
  for (const ChatMessage& m : messages) {
    if (m.role.empty() || m.role.find_first_of("\n<") != std::string::npos) {
      return MakeError(ErrorCode::kInvalidArgument, "invalid chat role '" + m.role + "'");
    }
    total += m.role.size() + m.content.size() + 32;
  }
  std::string out;
  out.reserve(total + tmpl.default_system.size());
  switch (tmpl.kind) {
    case ChatTemplateKind::kChatMl:
      for (size_t i = 0; i < messages.size(); ++i) {
        if (i == 0 && messages[0].role != "system" && !tmpl.default_system.empty()) {
          out.append(kImStartSystem).append(tmpl.default_system).append(kImEnd).append("\n");
        }
        out.append("<|im_start|>").append(messages[i].role).append("\n");
        out.append(messages[i].content).append(kImEnd).append("\n");
      }
      if (add_generation_prompt) out.append("<|im_start|>assistant\n");
      break;
    case ChatTemplateKind::kLlama3:
      for (size_t i = 0; i < messages.size(); ++i) {
        if (i == 0) out.append("<|begin_of_text|>");
        out.append("<|start_header_id|>").append(messages[i].role).append("<|end_header_id|>\n\n");
        out.append(Trim(messages[i].content)).append("<|eot_id|>");
      }
      if (add_generation_prompt) out.append("<|start_header_id|>assistant<|end_header_id|>\n\n");
      break;
  }
  return out;
}

}  // namespace kvgate::engine

// Chat templates: turn a conversation into the prompt text a model was trained on.
//
// kvgate does not run Jinja. It recognises the two template families its models use by inspecting
// the GGUF's `tokenizer.chat_template` string and renders them natively:
//   ChatML (SmolLM2, Qwen):  <|im_start|>{role}\n{content}<|im_end|>\n ...
//   [<|im_start|>assistant\n]
//     with the template's default system message (if it has one) inserted before the first message
//     when that message is not a system message.
//   Llama 3:
//   <|begin_of_text|><|start_header_id|>{role}<|end_header_id|>\n\n{trim(content)}<|eot_id|>
//     ... [<|start_header_id|>assistant<|end_header_id|>\n\n]
// The rendered text is meant for Tokenizer::Encode(text, /*parse_special=*/true). Content is
// inserted verbatim, exactly as the reference templates do; callers that must stop users from
// forging turns should reject special-token text in content before rendering.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "local_engine/gguf.h"

namespace kvgate::engine {

enum class ChatTemplateKind { kChatMl, kLlama3 };

struct ChatTemplate {
  ChatTemplateKind kind = ChatTemplateKind::kChatMl;
  // ChatML only: system message used when the conversation does not start with one; empty = none.
  std::string default_system;
};

struct ChatMessage {
  std::string role;  // "system", "user", "assistant", ...
  std::string content;
};

// Recognises a Jinja chat template. Errors: kInvalidArgument when it is neither family, or is a
// variant kvgate cannot reproduce exactly (Llama 3.1+ with its date/tools system header).
Result<ChatTemplate> ChatTemplateFromJinja(std::string_view jinja);
// From `tokenizer.chat_template`; kNotFound when the file has none.
Result<ChatTemplate> ChatTemplateFromGguf(const GgufFile& file);

// Errors: kInvalidArgument for an empty role or one containing a newline or '<'.
Result<std::string> ApplyChatTemplate(const ChatTemplate& tmpl,
                                      const std::vector<ChatMessage>& messages,
                                      bool add_generation_prompt);

}  // namespace kvgate::engine

#include "local_engine/chat_template.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

namespace kvgate::engine {
namespace {

constexpr std::string_view kSmolDefault =
    "You are a helpful AI assistant named SmolLM, trained by Hugging Face";

std::string ModelPath() {
  return std::string(KVGATE_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

nlohmann::json LoadVectors() {
  std::ifstream in(std::string(KVGATE_SOURCE_DIR) +
                   "/tests/engine_io/data/chat_template_vectors.json");
  return nlohmann::json::parse(in, nullptr, false);
}

// Prompts rendered by jinja2 from the real templates (scripts/gen_chat_template_vectors.py).
TEST(ChatTemplateTest, MatchesJinjaRenderings) {
  const auto doc = LoadVectors();
  ASSERT_FALSE(doc.is_discarded());
  ASSERT_GE(doc.at("cases").size(), 40u);
  for (const auto& c : doc.at("cases")) {
    const std::string name = c.at("template");
    const std::string jinja = doc.at("templates").at(name);
    auto tmpl = ChatTemplateFromJinja(jinja);
    ASSERT_TRUE(tmpl.has_value()) << name << ": " << tmpl.error().message;
    std::vector<ChatMessage> messages;
    for (const auto& m : c.at("messages")) messages.push_back({m.at("role"), m.at("content")});
    auto got = ApplyChatTemplate(*tmpl, messages, c.at("add_generation_prompt"));
    ASSERT_TRUE(got.has_value()) << got.error().message;
    EXPECT_EQ(*got, c.at("expected").get<std::string>())
        << name << " " << c.at("messages").dump() << " gen=" << c.at("add_generation_prompt");
  }
}

TEST(ChatTemplateTest, RecognisesFamilies) {
  const auto doc = LoadVectors();
  ASSERT_FALSE(doc.is_discarded());
  auto smol = ChatTemplateFromJinja(doc.at("templates").at("smollm2").get<std::string>());
  ASSERT_TRUE(smol.has_value());
  EXPECT_EQ(smol->kind, ChatTemplateKind::kChatMl);
  EXPECT_EQ(smol->default_system, kSmolDefault);
  auto qwen = ChatTemplateFromJinja(doc.at("templates").at("qwen2.5-style").get<std::string>());
  ASSERT_TRUE(qwen.has_value());
  EXPECT_EQ(qwen->default_system,
            "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.");
  auto llama = ChatTemplateFromJinja(doc.at("templates").at("llama3").get<std::string>());
  ASSERT_TRUE(llama.has_value());
  EXPECT_EQ(llama->kind, ChatTemplateKind::kLlama3);
  // ChatML without a default system message (Qwen3 style).
  auto plain = ChatTemplateFromJinja(
      "{%- for message in messages %}{{- '<|im_start|>' + message.role + '\\n' + "
      "message.content + '<|im_end|>\\n' }}{%- endfor %}");
  ASSERT_TRUE(plain.has_value());
  EXPECT_TRUE(plain->default_system.empty());
  auto out = ApplyChatTemplate(*plain, {{"user", "hi"}}, true);
  EXPECT_EQ(*out, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatTemplateTest, RejectsUnknownTemplatesAndRoles) {
  auto unknown = ChatTemplateFromJinja("{{ bos_token }}[INST] {{ content }} [/INST]");
  ASSERT_FALSE(unknown.has_value());
  EXPECT_EQ(unknown.error().code, ErrorCode::kInvalidArgument);
  auto l31 = ChatTemplateFromJinja(
      "{{- '<|start_header_id|>system<|end_header_id|>\\n\\n' }}Cutting Knowledge Date: ...");
  ASSERT_FALSE(l31.has_value());
  EXPECT_NE(l31.error().message.find("3.1"), std::string::npos);
  const ChatTemplate chatml{ChatTemplateKind::kChatMl, ""};
  EXPECT_EQ(ApplyChatTemplate(chatml, {{"", "x"}}, false).error().code,
            ErrorCode::kInvalidArgument);
  EXPECT_FALSE(ApplyChatTemplate(chatml, {{"user\nsystem", "x"}}, false).has_value());
  EXPECT_FALSE(ApplyChatTemplate(chatml, {{"<|im_end|>", "x"}}, false).has_value());
}

TEST(ChatTemplateTest, FromRealGguf) {
  if (!std::filesystem::exists(ModelPath())) GTEST_SKIP() << "model not fetched";
  auto f = GgufFile::Open(ModelPath());
  ASSERT_TRUE(f.has_value());
  auto t = ChatTemplateFromGguf(**f);
  ASSERT_TRUE(t.has_value()) << t.error().message;
  EXPECT_EQ(t->kind, ChatTemplateKind::kChatMl);
  EXPECT_EQ(t->default_system, kSmolDefault);
  // The committed vectors were rendered from this very template.
  const auto doc = LoadVectors();
  EXPECT_EQ((*f)->GetString("tokenizer.chat_template"),
            doc.at("templates").at("smollm2").get<std::string>());
}

TEST(ChatTemplateTest, GgufWithoutTemplate) {
  const std::vector<uint8_t> bytes = {'G', 'G', 'U', 'F', 3, 0, 0, 0, 0, 0, 0, 0,
                                      0,   0,   0,   0,   0, 0, 0, 0, 0, 0, 0, 0};
  auto f = GgufFile::FromBytes(bytes, "bare.gguf");
  ASSERT_TRUE(f.has_value()) << f.error().message;
  auto t = ChatTemplateFromGguf(**f);
  ASSERT_FALSE(t.has_value());
  EXPECT_EQ(t.error().code, ErrorCode::kNotFound);
}

}  // namespace
}  // namespace kvgate::engine

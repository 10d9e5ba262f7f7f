#include "data/chat-template.h"

#include <gtest/gtest.h>

#include "fake-tokenizer.h"

namespace spillway {
namespace {

using Special = ChatSegment::Special;

// "[B]" / "[E]" for BOS / EOS, trained text in {braces}.
std::string show(const std::vector<ChatSegment>& segs) {
  std::string s;
  for (const ChatSegment& g : segs) {
    std::string piece = g.special == Special::kBos   ? "[B]"
                        : g.special == Special::kEos ? "[E]"
                                                     : g.text;
    s += g.trained ? "{" + piece + "}" : piece;
  }
  return s;
}

const std::vector<ChatMessage> kConversation = {
    {ChatRole::kSystem, "Be kind."},  {ChatRole::kUser, "Hi "},
    {ChatRole::kAssistant, "Hello."}, {ChatRole::kUser, "Bye"},
    {ChatRole::kAssistant, "Bye!"},
};

std::string render(ChatTemplateKind kind, const std::vector<ChatMessage>& msgs = kConversation) {
  auto r = render_chat(kind, msgs);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? show(*r) : "";
}

TEST(ChatTemplate, Llama2) {
  EXPECT_EQ(render(ChatTemplateKind::kLlama2),
            "[B][INST] <<SYS>>\nBe kind.\n<</SYS>>\n\nHi [/INST]{Hello. }{[E]}"
            "[B][INST] Bye [/INST]{Bye! }{[E]}");
}

TEST(ChatTemplate, Llama3) {
  EXPECT_EQ(render(ChatTemplateKind::kLlama3),
            "[B]<|start_header_id|>system<|end_header_id|>\n\nBe kind.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n{Hello.<|eot_id|>}"
            "<|start_header_id|>user<|end_header_id|>\n\nBye<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n{Bye!<|eot_id|>}");
}

TEST(ChatTemplate, ChatMl) {
  EXPECT_EQ(render(ChatTemplateKind::kChatMl),
            "<|im_start|>system\nBe kind.<|im_end|>\n<|im_start|>user\nHi <|im_end|>\n"
            "<|im_start|>assistant\n{Hello.<|im_end|>}\n<|im_start|>user\nBye<|im_end|>\n"
            "<|im_start|>assistant\n{Bye!<|im_end|>}\n");
}

TEST(ChatTemplate, Alpaca) {
  EXPECT_EQ(render(ChatTemplateKind::kAlpaca),
            "[B]Be kind.\n\n### Instruction:\nHi \n\n### Response:\n{Hello.}{[E]}"
            "\n\n### Instruction:\nBye\n\n### Response:\n{Bye!}{[E]}");
  std::vector<ChatMessage> no_system(kConversation.begin() + 1, kConversation.begin() + 3);
  EXPECT_EQ(render(ChatTemplateKind::kAlpaca, no_system),
            "[B]Below is an instruction that describes a task. Write a response that appropriately "
            "completes the request.\n\n### Instruction:\nHi \n\n### Response:\n{Hello.}{[E]}");
}

TEST(ChatTemplate, Plain) {
  EXPECT_EQ(render(ChatTemplateKind::kPlain), "[B]Be kind.\n\nHi \n{Hello.}{[E]}Bye\n{Bye!}{[E]}");
}

TEST(ChatTemplate, ToolMessagesInChatMl) {
  std::vector<ChatMessage> msgs = {{ChatRole::kUser, "q"},
                                   {ChatRole::kToolCall, "{\"name\": \"f\"}"},
                                   {ChatRole::kToolResult, "7"},
                                   {ChatRole::kAssistant, "a"}};
  EXPECT_EQ(render(ChatTemplateKind::kChatMl, msgs),
            "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n"
            "{<tool_call>\n{\"name\": \"f\"}\n</tool_call><|im_end|>}\n"
            "<|im_start|>user\n<tool_response>\n7\n</tool_response><|im_end|>\n"
            "<|im_start|>assistant\n{a<|im_end|>}\n");
  EXPECT_EQ(render(ChatTemplateKind::kLlama3, msgs),
            "[B]<|start_header_id|>user<|end_header_id|>\n\nq<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n{{\"name\": \"f\"}<|eot_id|>}"
            "<|start_header_id|>ipython<|end_header_id|>\n\n7<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n{a<|eot_id|>}");
}

TEST(ChatTemplate, RejectsBadConversations) {
  EXPECT_FALSE(render_chat(ChatTemplateKind::kPlain, {}).ok());
  std::vector<ChatMessage> late_system = {{ChatRole::kUser, "a"}, {ChatRole::kSystem, "b"}};
  EXPECT_FALSE(render_chat(ChatTemplateKind::kPlain, late_system).ok());
  std::vector<ChatMessage> ok = {{ChatRole::kUser, "a"}, {ChatRole::kAssistant, "b"}};
  EXPECT_FALSE(render_chat(ChatTemplateKind::kAuto, ok).ok());
}

TEST(ChatTemplate, DetectsJinjaTemplates) {
  EXPECT_EQ(detect_chat_template("{% for message in messages %}{{'<|im_start|>' + message['role']"),
            ChatTemplateKind::kChatMl);
  EXPECT_EQ(
      detect_chat_template("{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>' }}"),
      ChatTemplateKind::kLlama3);
  EXPECT_EQ(detect_chat_template("{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}"),
            ChatTemplateKind::kLlama2);
  EXPECT_EQ(detect_chat_template("{{ '### Instruction:\\n' + message['content'] }}"),
            ChatTemplateKind::kAlpaca);
  EXPECT_EQ(detect_chat_template("{{ message['content'] }}"), ChatTemplateKind::kAuto);
  EXPECT_EQ(detect_chat_template(""), ChatTemplateKind::kAuto);
}

TEST(ChatTemplate, ChoiceOrder) {
  testing::FakeByteTokenizer qwen_like("{{'<|im_start|>' + message['role']}}");
  testing::FakeByteTokenizer none;
  // Setting wins.
  EXPECT_EQ(choose_chat_template(ChatTemplateKind::kAlpaca, &qwen_like, "qwen2").kind,
            ChatTemplateKind::kAlpaca);
  // Then the model's own template, rendered as it is (kModel), even against the family; "model"
  // asks for the same.
  auto c = choose_chat_template(ChatTemplateKind::kAuto, &qwen_like, "llama");
  EXPECT_EQ(c.kind, ChatTemplateKind::kModel);
  EXPECT_EQ(c.jinja, "{{'<|im_start|>' + message['role']}}");
  EXPECT_NE(c.reason.find("the model's own chat template"), std::string::npos);
  EXPECT_EQ(choose_chat_template(ChatTemplateKind::kModel, &qwen_like, "").kind,
            ChatTemplateKind::kModel);
  // "model" for a model that ships none: the family's hand-written one, saying so.
  auto none_model = choose_chat_template(ChatTemplateKind::kModel, &none, "qwen2");
  EXPECT_EQ(none_model.kind, ChatTemplateKind::kChatMl);
  EXPECT_EQ(none_model.reason,
            "the model ships no chat template; from model family 'qwen2': chatml");
  // Then the family.
  EXPECT_EQ(choose_chat_template(ChatTemplateKind::kAuto, &none, "qwen2").kind,
            ChatTemplateKind::kChatMl);
  EXPECT_EQ(choose_chat_template(ChatTemplateKind::kAuto, &none, "Mistral").kind,
            ChatTemplateKind::kLlama2);
  EXPECT_EQ(choose_chat_template(ChatTemplateKind::kAuto, &none, "llama").kind,
            ChatTemplateKind::kLlama2);
  // Then the fallback setting.
  EXPECT_EQ(choose_chat_template(ChatTemplateKind::kAuto, &none, "gpt2").kind,
            ChatTemplateKind::kPlain);
  EXPECT_EQ(
      choose_chat_template(ChatTemplateKind::kAuto, nullptr, "", ChatTemplateKind::kAlpaca).kind,
      ChatTemplateKind::kAlpaca);
}

TEST(ChatTemplate, DefaultSystemOfChatMlTemplates) {
  // Qwen2's template, as the Jinja source holds it (the newline is an escape in a literal).
  EXPECT_EQ(
      default_system_of_template(
          "{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\\nYou "
          "are a helpful assistant.<|im_end|>\\n' }}{% endif %}"),
      "You are a helpful assistant.");
  // An expression is not a default.
  EXPECT_EQ(default_system_of_template(
                "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"),
            "");
  EXPECT_EQ(default_system_of_template("{{ '<|im_start|>' + message['role'] }}"), "");

  testing::FakeByteTokenizer qwen2(
      "{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}");
  // The hand-written ChatML, forced on a model with its own template, keeps its default system.
  auto c = choose_chat_template(ChatTemplateKind::kChatMl, &qwen2, "");
  EXPECT_EQ(c.kind, ChatTemplateKind::kChatMl);
  EXPECT_EQ(c.default_system, "You are a helpful assistant.");
}

TEST(ChatTemplate, NamesRoundTrip) {
  for (auto k : {ChatTemplateKind::kAuto, ChatTemplateKind::kLlama2, ChatTemplateKind::kLlama3,
                 ChatTemplateKind::kChatMl, ChatTemplateKind::kAlpaca, ChatTemplateKind::kPlain,
                 ChatTemplateKind::kModel}) {
    auto p = parse_chat_template_kind(chat_template_name(k));
    ASSERT_TRUE(p.ok());
    EXPECT_EQ(*p, k);
  }
  EXPECT_EQ(*parse_chat_template_kind("Qwen"), ChatTemplateKind::kChatMl);
  EXPECT_FALSE(parse_chat_template_kind("jinja").ok());
}

}  // namespace
}  // namespace spillway

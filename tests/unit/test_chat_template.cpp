#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "sieve/tokenizer/chat_template.h"

using namespace sieve;

namespace {

std::string read_text(const std::string &path) {
    std::ifstream f(path, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

std::string template_path(const std::string &name) {
    return std::string(SIEVE_TEST_DATA) + "/chat/templates/" + name + ".jinja";
}

ChatFormat expected_format(const std::string &name) {
    if (name == "llama3") return ChatFormat::llama3;
    if (name == "llama2") return ChatFormat::llama2;
    if (name == "mistral") return ChatFormat::mistral;
    return ChatFormat::chatml;  // smollm2, chatml
}

}  // namespace

// Every case of golden.json (rendered by eval/chat/gen_golden.py with jinja2
// from the real templates) must come out byte for byte, and where the real
// template raises, so must we — except mistral with a system message, which
// we accept on purpose (see chat_template.h).
TEST(ChatTemplate, MatchesJinjaGolden) {
    const std::string text = read_text(std::string(SIEVE_TEST_DATA) + "/chat/golden.json");
    ASSERT_FALSE(text.empty()) << "missing tests/data/chat/golden.json; run eval/chat/gen_golden.py";
    const nlohmann::json golden = nlohmann::json::parse(text);
    int n_rendered = 0, n_raised = 0;
    for (const auto &c : golden.at("cases")) {
        const std::string name = c.at("template");
        const std::string source = read_text(template_path(name));
        ASSERT_FALSE(source.empty()) << template_path(name);
        Result<ChatTemplate> t = chat_template_from_jinja(source, c.at("bos"), c.at("eos"));
        ASSERT_TRUE(t.ok()) << name << ": " << t.status().message();
        ASSERT_EQ(t->format, expected_format(name)) << name;

        std::vector<ChatMessage> msgs;
        for (const auto &m : c.at("messages")) msgs.push_back({m.at("role"), m.at("content")});
        const bool gen = c.at("add_generation_prompt");
        Result<std::string> got = chat_render(*t, msgs, gen);
        const std::string where = name + " case " + c.at("messages").dump() + (gen ? " +gen" : "");
        if (c.contains("raises")) {
            if (name == "mistral" && !msgs.empty() && msgs[0].role == "system" && msgs.size() > 1) continue;
            EXPECT_FALSE(got.ok()) << where << " rendered \"" << got.value() << "\" but jinja raised "
                                   << c.at("raises");
            ++n_raised;
        } else {
            ASSERT_TRUE(got.ok()) << where << ": " << got.status().message();
            EXPECT_EQ(*got, c.at("expected").get<std::string>()) << where;
            ++n_rendered;
        }
    }
    EXPECT_GT(n_rendered, 100);
    EXPECT_GT(n_raised, 5);
}

TEST(ChatTemplate, SmolLM2DefaultSystemPromptIsExtracted) {
    Result<ChatTemplate> t = chat_template_from_jinja(read_text(template_path("smollm2")), "", "");
    ASSERT_TRUE(t.ok());
    EXPECT_EQ(t->default_system, "You are a helpful AI assistant named SmolLM, trained by Hugging Face");
    Result<ChatTemplate> plain = chat_template_from_jinja(read_text(template_path("chatml")), "", "");
    ASSERT_TRUE(plain.ok());
    EXPECT_EQ(plain->default_system, "");
}

// Qwen-style: the first '<|im_start|>system\n' literal is followed by the
// user's system message (not a default); the second is the default, written
// with escaped newlines and an escaped quote.
TEST(ChatTemplate, DefaultSystemSkipsBrokenLiteralsAndUnescapes) {
    const std::string src =
        "{%- if messages[0]['role'] == 'system' %}{{- '<|im_start|>system\\n' + messages[0]['content'] + "
        "'<|im_end|>\\n' }}{%- else %}{{- '<|im_start|>system\\nYou\\'re Qwen.\\nBe helpful.<|im_end|>\\n' }}"
        "{%- endif %}";
    Result<ChatTemplate> t = chat_template_from_jinja(src, "", "");
    ASSERT_TRUE(t.ok());
    EXPECT_EQ(t->format, ChatFormat::chatml);
    EXPECT_EQ(t->default_system, "You're Qwen.\nBe helpful.");
}

TEST(ChatTemplate, UnknownTemplateIsAClearError) {
    Result<ChatFormat> f = chat_format_detect("{% for m in messages %}<start_of_turn>{{ m.content }}{% endfor %}");
    ASSERT_FALSE(f.ok());
    const std::string &msg = f.status().message();
    EXPECT_NE(msg.find("--chat-template"), std::string::npos) << msg;
    EXPECT_NE(msg.find("chatml, llama3, llama2, mistral"), std::string::npos) << msg;
    EXPECT_NE(msg.find("<start_of_turn>"), std::string::npos) << msg;  // shows what it saw
}

TEST(ChatTemplate, NamesRoundTripAndUnknownNamesFail) {
    for (ChatFormat f : {ChatFormat::chatml, ChatFormat::llama3, ChatFormat::llama2, ChatFormat::mistral}) {
        Result<ChatFormat> back = chat_format_from_name(chat_format_name(f));
        ASSERT_TRUE(back.ok());
        EXPECT_EQ(*back, f);
    }
    EXPECT_EQ(*chat_format_from_name("llama-3"), ChatFormat::llama3);
    Result<ChatFormat> bad = chat_format_from_name("gemma");
    ASSERT_FALSE(bad.ok());
    EXPECT_NE(bad.status().message().find("'gemma'"), std::string::npos);
}

TEST(ChatTemplate, MistralFoldsTheSystemMessageIntoTheFirstUserTurn) {
    ChatTemplate t;
    t.format = ChatFormat::mistral;
    t.bos = "<s>";
    t.eos = "</s>";
    Result<std::string> r = chat_render(t, {{"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Yo"}, {"user", "?"}},
                                        true);
    ASSERT_TRUE(r.ok()) << r.status().message();
    EXPECT_EQ(*r, "<s>[INST] Be brief.\n\nHi [/INST]Yo</s>[INST] ? [/INST]");
    EXPECT_FALSE(chat_render(t, {{"system", "alone"}}, true).ok());
}

// Chat templates: recognise the family of a model's `tokenizer.chat_template`
// (a Jinja program) and render conversations natively in that family's format.
//
// No Jinja engine is packaged for Debian, so instead of interpreting the
// template we recognise which well-known template it is by characteristic
// markers and reproduce its output exactly (tests/data/chat/golden.json holds
// the real templates' output, rendered by PyPI jinja2, for comparison):
//
//   format   marker in the template        models                     turn layout
//   chatml   <|im_start|>                  SmolLM2, Qwen2, Qwen2.5    <|im_start|>ROLE\nTEXT<|im_end|>\n
//   llama3   <|start_header_id|>           Llama 3 / 3.x Instruct     <|start_header_id|>ROLE<|end_header_id|>\n\nTEXT<|eot_id|>
//   llama2   [INST] and <<SYS>>            Llama 2 chat               <s>[INST] <<SYS>>\nSYS\n<</SYS>>\n\nTEXT [/INST] ANSWER </s>
//   mistral  [INST] without <<SYS>>        Mistral 7B Instruct v0.1/2 <s>[INST] TEXT [/INST]ANSWER</s>
//
// ChatML templates that insert a default system prompt when the conversation
// has none (SmolLM2, Qwen) are handled by extracting that prompt from the
// template source (ChatTemplate::default_system).
#pragma once

#include <string>
#include <vector>

#include "sieve/core/status.h"

namespace sieve {

struct ChatMessage {
    std::string role;  // "system", "user" or "assistant"
    std::string content;
};

enum class ChatFormat { chatml, llama3, llama2, mistral };

const char *chat_format_name(ChatFormat f);
// "chatml, llama3, llama2, mistral": for help texts and error messages.
std::string chat_format_names();

// Recognises the family of a Jinja template by its markers (table above).
// An unknown template is an error that suggests --chat-template NAME.
Result<ChatFormat> chat_format_detect(const std::string &jinja_source);
// For --chat-template NAME (llama.cpp's names; "llama3" also accepts "llama-3").
Result<ChatFormat> chat_format_from_name(const std::string &name);

struct ChatTemplate {
    ChatFormat format = ChatFormat::chatml;
    // Inserted as the first message when the conversation has no system
    // message (chatml only; empty = none).
    std::string default_system;
    std::string bos;  // text of the BOS token, written where the template writes bos_token
    std::string eos;  // text of the EOS token, written where the template writes eos_token
};

// Detects the format and extracts the default system prompt, if any.
Result<ChatTemplate> chat_template_from_jinja(const std::string &jinja_source, std::string bos, std::string eos);

// Renders a conversation as the family's real template does. With
// add_generation_prompt the text ends with the assistant's turn opened
// (llama2 and mistral always end a user turn with " [/INST]", their templates
// have no such flag). Errors where the real template raises: llama2 and
// mistral need user/assistant turns to alternate starting with user. One
// extension: mistral's template rejects a system message; we prepend a
// leading one to the first user message, separated by a blank line, as
// llama.cpp does, so -sys works with every model.
Result<std::string> chat_render(const ChatTemplate &tmpl, const std::vector<ChatMessage> &messages,
                                bool add_generation_prompt);

}  // namespace sieve

#!/usr/bin/env python3
"""Renders conversations with real chat templates (Jinja, as Hugging Face
transformers runs them) into tests/data/chat/golden.json, the oracle for
sieve's native renderers (tests/unit/test_chat_template.cpp).

Templates live in tests/data/chat/templates/*.jinja, copied verbatim from the
models' tokenizer configs (smollm2.jinja is SmolLM2-135M-Instruct's
`tokenizer.chat_template`); the C++ test also runs format detection on them.

    pip install jinja2
    python3 eval/chat/gen_golden.py
"""
import json
import pathlib

from jinja2.exceptions import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = pathlib.Path(__file__).resolve().parents[2]
CHAT = ROOT / "tests" / "data" / "chat"

# name -> (bos_token, eos_token) of the models that use the template.
TEMPLATES = {
    "smollm2": ("<|im_start|>", "<|im_end|>"),
    "chatml": ("<s>", "</s>"),
    "llama3": ("<|begin_of_text|>", "<|eot_id|>"),
    "llama2": ("<s>", "</s>"),
    "mistral": ("<s>", "</s>"),
}


def msg(role, content):
    return {"role": role, "content": content}


CONVERSATIONS = [
    [msg("user", "Hello!")],
    [msg("system", "You are terse."), msg("user", "What is 2+2?")],
    [msg("user", "Hi"), msg("assistant", "Hello! How can I help?"), msg("user", "Tell me a joke.")],
    [
        msg("system", "Be kind."),
        msg("user", "  padded  \n"),
        msg("assistant", "\n answer with spaces  "),
        msg("user", "next\tone"),
    ],
    [msg("user", "\u00a0 Unicode: café 日本語 🙂, edges are NBSP and ideographic space\u3000")],
    [msg("user", "\u2028line separator\x1f and \u200b zero-width (not space)\u200b")],
    [msg("user", "quotes ' \" and {{ braces }} and {% tags %} and \\n backslash-n")],
    [msg("user", "")],
    [msg("system", ""), msg("user", "empty system prompt")],
    [msg("system", "sys only")],
    [
        msg("system", "You are a pirate.\nStay in character."),
        msg("user", "Where is the treasure?"),
        msg("assistant", "Arr, buried deep!"),
        msg("user", "How deep?"),
        msg("assistant", "Forty paces, matey."),
        msg("user", "Thanks.\n\nBye."),
    ],
    [msg("user", "first"), msg("user", "second user turn in a row")],
    [msg("assistant", "assistant speaks first")],
    [msg("user", "q"), msg("assistant", "a")],
]


def raise_exception(message):
    raise TemplateError(message)


def main():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    cases = []
    for name, (bos, eos) in TEMPLATES.items():
        template = env.from_string((CHAT / "templates" / f"{name}.jinja").read_text())
        for conv in CONVERSATIONS:
            for gen in (True, False):
                case = {"template": name, "bos": bos, "eos": eos, "add_generation_prompt": gen, "messages": conv}
                try:
                    case["expected"] = template.render(
                        messages=conv, add_generation_prompt=gen, bos_token=bos, eos_token=eos
                    )
                except TemplateError as e:
                    case["raises"] = str(e)
                cases.append(case)
    out = CHAT / "golden.json"
    out.write_text(json.dumps({"cases": cases}, ensure_ascii=False, indent=1) + "\n")
    print(f"wrote {len(cases)} cases to {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Golden token ids for tests/unit/test_tokenizer.cpp, from independent tokenizers.

Writes, under tests/data/tokenizer/:
  corpus.jsonl     the corpus, one JSON string per line (for people to read)
  smollm2.golden   ids from a Hugging Face `tokenizers` tokenizer of SmolLM2
  stories260k.golden  ids from a `sentencepiece` model of stories260K
  pretok.golden    pre-tokenizer splits from HF `tokenizers` for each regex
                   family sieve implements (gpt2, llama3, qwen2, smollm)

Golden file format (so the C++ test needs no JSON parser): '#' lines are
comments; every other line is three tab-separated fields:
  hex(UTF-8 text) <TAB> ids with special-token parsing <TAB> ids without
ids space-separated, possibly empty. pretok.golden lines are
  family <TAB> hex(UTF-8 text) <TAB> byte offsets where each piece ends

How each oracle is built (no network: both come from the GGUF's own vocabulary).

SmolLM2 (tokenizer.ggml.model = gpt2, tokenizer.ggml.pre = smollm):
  tokenizers.Tokenizer configured as SmolLM2's tokenizer.json
  (HuggingFaceTB/SmolLM2-135M, which SmolLM2-135M-Instruct shares):
    model         BPE(vocab, merges) with dropout=None, unk_token=None,
                  continuing_subword_prefix=None, end_of_word_suffix=None,
                  fuse_unk=False, byte_fallback=False (ignore_merges=False)
    normalizer    none
    pre_tokenizer Sequence([Digits(individual_digits=True),
                            ByteLevel(add_prefix_space=False, trim_offsets=True,
                                      use_regex=True)])
    decoder       ByteLevel
    added tokens  the 17 tokens the GGUF types as control (ids 0..16,
                  <|endoftext|> .. <empty_output>), all special=True,
                  normalized/lstrip/rstrip/single_word False
  vocab = tokenizer.ggml.tokens (id = index), merges = tokenizer.ggml.merges
  (rank = index). The GGUF converter copies both verbatim from tokenizer.json.
  "with special" = encode(text, add_special_tokens=False);
  "without"      = the same with encode_special_tokens=True (added tokens are
                   then split as ordinary text). add_bos_token is false.

stories260K (tokenizer.ggml.model = llama):
  a sentencepiece ModelProto: model_type BPE, pieces/scores/types copied from
  tokenizer.ggml.tokens/scores/token_type, byte_fallback=True, unk/bos/eos ids
  from the metadata, normalizer "identity" with add_dummy_prefix =
  tokenizer.ggml.add_space_prefix (default true), escape_whitespaces=True and
  remove_extra_whitespaces=False (llama.cpp keeps whitespace runs as they are).
  ids = [bos] + encode(text) (the model adds BOS by default); sentencepiece
  never parses control-token text, so both columns hold the same ids.

Needs PyPI gguf, tokenizers, sentencepiece and protobuf (for sentencepiece_model_pb2).
Usage: python3 eval/tokenizer/gen_golden.py [--smollm2 PATH] [--stories PATH]
  (defaults: $SIEVE_CACHE or ~/.cache/sieve for SmolLM2, ../shared/models for stories)
"""
import argparse
import json
import os
import random
from pathlib import Path

import gguf

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "tests" / "data" / "tokenizer"


# ---------------------------------------------------------------------------
# Corpus
# ---------------------------------------------------------------------------

FIXED = [
    "",
    " ",
    "  ",
    "\t",
    "\n",
    "\n\n\n",
    " \n \n ",
    "\r\n",
    "Hello world",
    "Hello, world!",
    " Hello world",
    "Hello world ",
    "  leading spaces",
    "trailing spaces   ",
    "multiple   internal     spaces",
    "tabs\tbetween\t\twords",
    "mixed \t\n whitespace \n\t run",
    "line one\nline two\n\nline four",
    "windows\r\nline\r\nendings",
    "The quick brown fox jumps over the lazy dog.",
    "Once upon a time, there was a little girl named Lily.",
    "She loved to play outside in the sunshine.",
    "I'm sure they'll say it's fine, don't you think? We've seen it.",
    "I'M SHOUTING, YOU'RE LISTENING, WE'LL SEE, IT'S DONE, I'D GO",
    "'s 're 'll 've 'm 'd 't",
    "rock'n'roll o'clock ma'am y'all",
    "\"quoted\" and 'single' and `backticks`",
    "Café naïve résumé façade Ångström crème brûlée",
    "e\u0301 combining acute vs \u00e9 precomposed",
    "Straße groß Füße Øresund Łódź",
    "Привет, мир! Как дела?",
    "Россия и Україна, Беларусь",
    "Γειά σου Κόσμε, αβγδεζηθ ΑΒΓΔ",
    "مرحبا بالعالم",
    "שלום עולם",
    "नमस्ते दुनिया, यह एक परीक्षण है।",
    "வணக்கம் உலகம்",
    "สวัสดีชาวโลก",
    "Xin chào thế giới, tiếng Việt có dấu",
    "你好，世界！这是一个测试。",
    "中文字符和English混合",
    "日本語のテキストとカタカナ、ひらがな。",
    "한국어 텍스트입니다.",
    "漢字かなカナ混じり文",
    "😀",
    "😀😃😄😁",
    "Emoji: 😀👍🏽🇺🇸 and ❤️",
    "👨‍👩‍👧‍👦 family ZWJ sequence",
    "🏳️‍🌈 🏴‍☠️ 👩🏽‍💻 🧑‍🚀",
    "🇫🇷🇩🇪🇯🇵🇧🇷 flags",
    "✅ ✔️ ⚠️ ☕ ♥ ★",
    "zero\u200bwidth\u200cjoin\u200dchars",
    "non\u00a0breaking\u00a0space",
    "ideographic\u3000space\u3000\u3000run",
    "em\u2003space and\u2009thin",
    "line\u2028separator\u2029paragraph",
    "next\u0085line",
    "!\u0085!",
    "vertical\u000btab\u000cform",
    "bell\u0007 escape\u001b[0m",
    "control \u0004\u0006\u0013\u0014\u0016\u001d bytes",
    "rare plane \U00050000 \U000a0000 \U00100000",
    "12345",
    "1234567890123456789012345678901234567890",
    "3.14159 2.71828 1.41421",
    "1,000,000 and 1.000.000,00",
    "-42 +17 0x1F 0b1011 1e-9 6.02e23",
    "2024-01-15T10:30:00Z",
    "Phone: +1 (555) 123-4567",
    "Version 1.2.3-beta.4+build.567",
    "١٢٣ ٤٥٦ Arabic-Indic digits",
    "०१२३४५६७८९ Devanagari digits",
    "Ⅻ Roman numeral ½ ¾ ² ³ superscripts",
    "１２３ fullwidth digits",
    "def foo(x):\n    return x ** 2\n",
    "int main(int argc, char **argv) {\n\treturn 0;\n}",
    "for (int i = 0; i < n; ++i) { sum += a[i]; }",
    "if x == 1 and y != 2 or not z:\n        pass",
    "const f = (a, b) => a + b; // arrow",
    "SELECT * FROM users WHERE id = 42;",
    "<div class=\"main\"><p>Hello</p></div>",
    "{\"key\": \"value\", \"list\": [1, 2, 3], \"nested\": {\"a\": null}}",
    "#include <stdio.h>\n#define MAX(a,b) ((a)>(b)?(a):(b))",
    "    indented four\n        indented eight",
    "fn main() -> Result<(), Box<dyn Error>> { Ok(()) }",
    "$ ls -la | grep \"*.txt\" && echo done",
    "https://example.com/path?query=1&other=two#frag",
    "user@example.org, first.last+tag@sub.domain.co.uk",
    "!!!",
    "???!!!...",
    "...---...",
    "-----",
    "=====",
    "*** bold *** _under_ ~~strike~~",
    "((()))[[[]]]{{{}}}",
    "@#$%^&*()_+-=[]{}|;':\",./<>?",
    "«guillemets» „Anführung“ “smart” ‘quotes’",
    "— en – dash … ellipsis",
    "¿Qué? ¡Sí!",
    "<|im_start|>",
    "<|im_end|>",
    "<|endoftext|>",
    "<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM<|im_end|>\n",
    "text before<|endoftext|>text after",
    "<|endoftext|><|endoftext|>",
    " <|im_start|> spaced <|im_end|> ",
    "<|im_start|><|im_end|>",
    "<|im_start",
    "im_start|>",
    "<|im_end|x",
    "<repo_name>sieve<file_sep>main.cpp<filename>a.py",
    "<jupyter_start><jupyter_code>print(1)<jupyter_output>1",
    "<s>",
    "</s>",
    "<unk>",
    "<s> hello </s>",
    "a",
    "A",
    "ab",
    "z",
    ".",
    "'",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "the the the the the the the the",
    "antidisestablishmentarianism",
    "pneumonoultramicroscopicsilicovolcanoconiosis",
    "CamelCaseIdentifierName snake_case_name kebab-case-name",
    "HTTPServerError XMLHttpRequest",
    "word\u00adsoft\u00adhyphen",
    "ﬁ ﬂ ligatures",
    "ℕ ℤ ℚ ℝ ℂ ∀x∃y: x≤y ∧ y≠0 ⇒ ∑ ∫ √",
    "Ελληνικά and English and Русский mixed",
    "Tab\tafter\tword\t",
    "\ttab first",
    "\n\nnewlines first",
    "newlines last\n\n",
    "space then newline \n next",
    "newline then space\n next",
    "   \n   \n   ",
    "a \n\n\n b",
    "x  1  2  3",
    "a1b2c3",
    "abc123def456",
    " 123 456 ",
    "$100.00 €50 £20 ¥1000",
    "100% of 50% is 25%",
]

FRAGMENTS = [
    "hello", "world", " the", " a", "Lily", " said", ",", ".", "!", "?", "'s", "'ll", "'re",
    "42", "2025", "3.5", " ", "  ", "\t", "\n", "\n\n", " \n", "é", "ß", "ж", "λ", "ع", "ह",
    "中", "文", "の", "한", "😀", "👍🏽", "🇯🇵", "👨‍💻", "(", ")", "{", "}", "=>", "::", "->",
    "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<", "|", ">", "_", "-", "...", "—", "“", "”",
    "def", "return", "int", " x", "==", "0x", "ff", "\u00a0", "\u3000", "\u200d",
]

SCRIPTS = [
    (0x0041, 0x005A), (0x0061, 0x007A), (0x00C0, 0x00FF), (0x0100, 0x017F), (0x0391, 0x03C9),
    (0x0410, 0x044F), (0x05D0, 0x05EA), (0x0620, 0x064A), (0x0905, 0x0939), (0x0E01, 0x0E30),
    (0x3041, 0x3093), (0x30A1, 0x30F6), (0x4E00, 0x4FFF), (0xAC00, 0xAD00), (0x1F600, 0x1F64F),
    (0x2000, 0x206F), (0x0021, 0x002F), (0x0030, 0x0039), (0xFF01, 0xFF5E),
]


def generated(rng, n):
    out = []
    for i in range(n):
        kind = i % 4
        if kind == 0:  # fragment soup
            s = "".join(rng.choice(FRAGMENTS) for _ in range(rng.randint(1, 14)))
        elif kind == 1:  # random code points from a few scripts, with spaces
            parts = []
            for _ in range(rng.randint(1, 5)):
                lo, hi = rng.choice(SCRIPTS)
                parts.append("".join(chr(rng.randint(lo, hi)) for _ in range(rng.randint(1, 8))))
            s = rng.choice([" ", "  ", "\n", "", "\t"]).join(parts)
        elif kind == 2:  # numbers and whitespace runs
            s = "".join(rng.choice([str(rng.randint(0, 10 ** rng.randint(1, 12))), " " * rng.randint(1, 5),
                                    "\n" * rng.randint(1, 3), "\t", ".", ",", "-", "x"])
                        for _ in range(rng.randint(2, 10)))
        else:  # prose with words from the fixed corpus, shuffled
            words = rng.choice(FIXED[8:60]).split(" ")
            rng.shuffle(words)
            s = " ".join(words)
        out.append(s)
    return out


def corpus():
    rng = random.Random(20250101)
    items = FIXED + generated(rng, 200)
    seen, uniq = set(), []
    for s in items:
        if s not in seen:
            seen.add(s)
            uniq.append(s)
    return uniq


# ---------------------------------------------------------------------------
# GGUF metadata
# ---------------------------------------------------------------------------

def field(reader, key, default=None):
    f = reader.fields.get(key)
    if f is None:
        return default
    t = f.types[0]
    if t == gguf.GGUFValueType.ARRAY:
        if f.types[-1] == gguf.GGUFValueType.STRING:
            return [bytes(f.parts[i]).decode("utf-8") for i in f.data]
        return [f.parts[i].tolist()[0] for i in f.data]
    if t == gguf.GGUFValueType.STRING:
        return bytes(f.parts[f.data[0]]).decode("utf-8")
    return f.parts[f.data[0]].tolist()[0]


# ---------------------------------------------------------------------------
# Oracles
# ---------------------------------------------------------------------------

def smollm2_oracle(path):
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    r = gguf.GGUFReader(path)
    assert field(r, "tokenizer.ggml.model") == "gpt2"
    assert field(r, "tokenizer.ggml.pre") == "smollm"
    assert field(r, "tokenizer.ggml.add_bos_token", False) is False
    tokens = field(r, "tokenizer.ggml.tokens")
    types = field(r, "tokenizer.ggml.token_type")
    merges = field(r, "tokenizer.ggml.merges")
    vocab = {t: i for i, t in enumerate(tokens)}
    assert len(vocab) == len(tokens), "duplicate tokens"
    pairs = [tuple(m.split(" ", 1)) for m in merges]
    # Unset options keep the library's defaults, which are tokenizer.json's
    # nulls: no dropout, no unk token, no subword prefix or suffix.
    tok = Tokenizer(models.BPE(vocab=vocab, merges=pairs, fuse_unk=False, byte_fallback=False))
    tok.normalizer = None
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel()
    specials = [tokens[i] for i, t in enumerate(types) if t == 3]
    assert specials == tokens[:17], specials
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False, lstrip=False, rstrip=False,
                                       single_word=False) for s in specials])
    for i, s in enumerate(specials):
        assert tok.token_to_id(s) == i

    def encode(text):
        tok.encode_special_tokens = False
        with_special = tok.encode(text, add_special_tokens=False).ids
        tok.encode_special_tokens = True
        plain = tok.encode(text, add_special_tokens=False).ids
        return with_special, plain

    return encode


def stories_oracle(path):
    import sentencepiece as spm
    from sentencepiece import sentencepiece_model_pb2 as pb

    r = gguf.GGUFReader(path)
    assert field(r, "tokenizer.ggml.model") == "llama"
    tokens = field(r, "tokenizer.ggml.tokens")
    scores = field(r, "tokenizer.ggml.scores")
    types = field(r, "tokenizer.ggml.token_type")
    add_bos = field(r, "tokenizer.ggml.add_bos_token", True)
    add_prefix = field(r, "tokenizer.ggml.add_space_prefix", True)
    bos = field(r, "tokenizer.ggml.bos_token_id", 1)

    m = pb.ModelProto()
    for t, s, ty in zip(tokens, scores, types):
        p = m.pieces.add()
        p.piece, p.score, p.type = t, s, ty  # GGUF token types use SentencePiece's numbering
    ts = m.trainer_spec
    ts.model_type = pb.TrainerSpec.BPE
    ts.vocab_size = len(tokens)
    ts.byte_fallback = True
    ts.unk_id = field(r, "tokenizer.ggml.unknown_token_id", 0)
    ts.bos_id = bos
    ts.eos_id = field(r, "tokenizer.ggml.eos_token_id", 2)
    ts.pad_id = -1
    ns = m.normalizer_spec
    ns.name = "identity"
    ns.add_dummy_prefix = add_prefix
    ns.remove_extra_whitespaces = False
    ns.escape_whitespaces = True
    sp = spm.SentencePieceProcessor(model_proto=m.SerializeToString())

    def encode(text):
        ids = ([bos] if add_bos else []) + sp.encode(text)
        return ids, ids

    return encode


# The Split patterns of Llama 3's and Qwen2's tokenizer.json, verbatim.
RE_LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
             r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
RE_QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
            r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def pretokenizers():
    from tokenizers import Regex, pre_tokenizers as P

    return {
        "gpt2": P.ByteLevel(add_prefix_space=False, use_regex=True),
        "llama3": P.Split(Regex(RE_LLAMA3), behavior="isolated", invert=False),
        "qwen2": P.Split(Regex(RE_QWEN2), behavior="isolated", invert=False),
        "smollm": P.Sequence([P.Digits(individual_digits=True),
                              P.ByteLevel(add_prefix_space=False, use_regex=True)]),
    }


def write_pretok_golden(path, texts):
    with open(path, "w", encoding="ascii") as f:
        f.write("# pre-tokenizer splits, HF tokenizers; generated by eval/tokenizer/gen_golden.py\n"
                "# family TAB hex(text) TAB byte offset where each piece ends\n")
        for family, pt in pretokenizers().items():
            for t in texts:
                # HF offsets count characters; the C++ side works in bytes.
                ends = [len(t[:end].encode("utf-8")) for _, (_, end) in pt.pre_tokenize_str(t)]
                f.write(f"{family}\t{t.encode('utf-8').hex()}\t{' '.join(map(str, ends))}\n")


def write_golden(path, title, texts, encode):
    with open(path, "w", encoding="ascii") as f:
        f.write(f"# {title}\n# generated by eval/tokenizer/gen_golden.py; hex(text) TAB ids(parse_special) "
                "TAB ids(no parse_special)\n")
        for t in texts:
            a, b = encode(t)
            f.write(f"{t.encode('utf-8').hex()}\t{' '.join(map(str, a))}\t{' '.join(map(str, b))}\n")


def main():
    cache = Path(os.environ.get("SIEVE_CACHE", Path.home() / ".cache" / "sieve"))
    ap = argparse.ArgumentParser()
    ap.add_argument("--smollm2", default=str(cache / "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--stories", default=str(REPO.parent / "shared" / "models" / "stories260K.gguf"))
    args = ap.parse_args()

    texts = corpus()
    OUT.mkdir(parents=True, exist_ok=True)
    with open(OUT / "corpus.jsonl", "w", encoding="utf-8") as f:
        for t in texts:
            f.write(json.dumps(t, ensure_ascii=False) + "\n")
    write_golden(OUT / "smollm2.golden", "SmolLM2-135M-Instruct, Hugging Face tokenizers", texts,
                 smollm2_oracle(args.smollm2))
    write_golden(OUT / "stories260k.golden", "stories260K, sentencepiece", texts, stories_oracle(args.stories))
    write_pretok_golden(OUT / "pretok.golden", texts)
    print(f"{len(texts)} strings -> {OUT}")


if __name__ == "__main__":
    main()

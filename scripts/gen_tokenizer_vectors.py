#!/usr/bin/env python3
"""Writes tests/engine_io/data/tokenizer_vectors.json: texts and the token ids an independent
reference tokenizer (llama.cpp through llama-cpp-python, vocab only) gives for them with the bundled
SmolLM2 GGUF. The C++ tokenizer test replays them.

The reference is NOT a project dependency; install it in a throwaway venv:
  $(bash scripts/setup_llama_reference.sh | tail -n 1) scripts/gen_tokenizer_vectors.py [--model PATH] [--out PATH]

Texts avoid unassigned code points (where llama.cpp's hand-written splitter and the GPT-2-style
pre-tokenizer regex the C++ tokenizer follows disagree) and the control bytes SmolLM2's vocabulary has no symbol for.
"""
import argparse
import json
import os
import random
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

ENGLISH = [
    "Hello world",
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog.",
    "What is the capital of France?",
    "I'm sure you're right, but they've said we'll see what she'd do.",
    "Don't stop believing. It's a long road; isn't it?",
    "IT'S LOUD AND I'M SHOUTING",
    "rock'n'roll and 'quoted' words and ''double'' quotes",
    "A sentence with trailing spaces   ",
    "   leading spaces",
    "multiple    spaces    between    words",
    "tabs\tand\ttabs\t\t\tand more",
    "line one\nline two\n\nline four\n",
    "windows\r\nline\r\nendings",
    "Mr. Smith went to Washington D.C. on Jan. 3rd, 2021.",
    "e-mail: someone@example.com, url: https://example.com/path?q=1&x=y#frag",
    "SmolLM2 is a family of compact language models available in three sizes: 135M, 360M, and 1.7B.",
    "Once upon a time, in a land far, far away, there lived a small dragon who loved books.",
    "Supercalifragilisticexpialidocious antidisestablishmentarianism",
    "Hyphenated-words and under_scored_words and CamelCaseWords",
    "Punctuation!!! Really??? Yes... (maybe) [surely] {certainly} <tags>",
    "Ellipsis… em—dash – en-dash “curly quotes” ‘single’ «guillemets»",
    "a",
    " ",
    "  ",
    "\n",
    "\n\n",
    " \n ",
    "\t",
    "x",
    "?",
    "'",
    "'s",
    " 's",
    "''s",
    "can't won't shan't y'all o'clock",
]

CODE = [
    "def add(a, b):\n    return a + b\n",
    "for (int i = 0; i < n; ++i) {\n  sum += a[i] * b[i];\n}",
    "#include <stdio.h>\nint main(void) { printf(\"hi\\n\"); return 0; }",
    "const x = await fetch(`/api/v1/items?id=${id}`);",
    "SELECT name, COUNT(*) FROM users WHERE age >= 18 GROUP BY name;",
    "<div class=\"container\"><p>Hello</p></div>",
    "{\"key\": [1, 2, 3], \"nested\": {\"a\": null, \"b\": true}}",
    "if x != y && z <= 10 || !flag:\n\tpass",
    "    indented with four spaces\n        and eight",
    "fn main() -> Result<(), Box<dyn Error>> { Ok(()) }",
    "$ ls -la /usr/local/bin | grep -v '^d' > out.txt 2>&1",
    "a=1;b=2;c=a+b;print(c)",
    "x += 1  # comment with  two spaces",
    "std::vector<std::pair<int, std::string>> v{{1, \"one\"}};",
    "lambda x: x**2 if x > 0 else -x",
    "@decorator\nclass Foo(Bar):\n    '''Docstring.'''\n    __slots__ = ()",
    "   \n\t  \n",
    "// TODO(alice): fix   this\n/* block */",
]

NUMBERS = [
    "1234567",
    "0",
    "42",
    "3.14159265358979",
    "1,000,000",
    "-273.15",
    "1e-10",
    "0x7FFF_FFFF",
    "In 2024 there were 366 days.",
    "Call 555-0123 or +1 (800) 555-0199.",
    "12:30pm on 2025-01-31",
    "v1.2.3-rc4",
    " 123 456  789",
    "abc123def456",
    "Ⅻ and ½ and ² and ٣ and ३",
    "1st 2nd 3rd 4th",
    "99 bottles of beer on the wall, 99 bottles of beer.",
    "007",
    "x1y2z3",
]

UNICODE = [
    "café naïve résumé façade",
    "Ångström Æsir Øresund ß straße",
    "ñandú pingüino acción",
    "e\u0301 (decomposed e-acute) vs \u00e9",
    "Привет, мир! Как дела?",
    "Γειά σου Κόσμε",
    "你好，世界！",
    "日本語のテキストとカタカナ、ひらがな。",
    "한국어 텍스트입니다",
    "مرحبا بالعالم",
    "שלום עולם",
    "नमस्ते दुनिया",
    "สวัสดีชาวโลก",
    "😀",
    "👍🏽 thumbs up",
    "👨‍👩‍👧‍👦 family",
    "🇫🇷🇩🇪 flags",
    "emoji in text 🙂 and more 🎉🎉🎉",
    "math: ∀x∈ℝ, x² ≥ 0; ∑ᵢ aᵢ ≠ ∞",
    "currency: €100 £50 ¥1000 ₹500 $5",
    "arrows → ← ↑ ↓ ⇒",
    "box ┌─┐│└┘",
    "zero\u200bwidth\u200bspace",
    "non\u00a0breaking\u00a0space",
    "ideographic\u3000space",
    "mixed 中文 and English 123 😀!",
    "Tiếng Việt có dấu",
    "Ελληνικά και English",
]

SPECIAL = [
    "<|im_start|>user\nHello!<|im_end|>\n",
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
    "<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
    "<|endoftext|>",
    "text before<|endoftext|>text after",
    "<|im_start|><|im_end|>",
    "<|im_start|> spaced <|im_end|>",
    "<|im_sta",
    "<|IM_START|>",
    "<|im_end|",
    "<<|im_end|>>",
    "<jupyter_code>print(1)<jupyter_output>1",
    "<repo_name>kvgate<file_sep>main.cc",
    "<filename>a.py\n<gh_stars>100",
    "<issue_start>bug<issue_comment>fixed<issue_closed>",
    "<empty_output>",
    "a<|im_end|>b<|im_start|>c",
    "<|im_start|>assistant\nThe answer is 4.<|im_end|>",
]

CHAT = [
    "<|im_start|>user\nWrite a haiku about the sea.<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nList 3 colors.<|im_end|>\n"
    "<|im_start|>assistant\nRed, green, blue.<|im_end|>\n<|im_start|>user\nMore?<|im_end|>\n"
    "<|im_start|>assistant\n",
    "<|im_start|>user\nTranslate 'bonjour' to English.<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>user\n```python\nprint('hi')\n```\nWhat does this do?<|im_end|>\n"
    "<|im_start|>assistant\n",
]

# Characters for random strings: letters, digits, punctuation, whitespace and a few non-ASCII
# assigned code points of each class.
POOL = (list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ") * 3 + list("0123456789") * 3 +
        list(" " * 20) + list("\n\t\r") + list("'\".,;:!?-_()[]{}<>/\\|@#$%^&*+=~`") +
        list("éüßøåçñ中文字日本한국ЖЩαβγ😀🎉½²٣€→\u00a0\u3000\u0301") + ["'s", "'ll", "'re", "<|im_end|>"])


def random_texts(n, seed=20261129):
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        length = rng.randint(1, 60)
        out.append("".join(rng.choice(POOL) for _ in range(length)))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(ROOT, "models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--out", default=os.path.join(ROOT, "tests/engine_io/data/tokenizer_vectors.json"))
    ap.add_argument("--random", type=int, default=250)
    args = ap.parse_args()

    from llama_cpp import Llama  # the reference; see the module docstring
    import llama_cpp

    llm = Llama(model_path=args.model, vocab_only=True, verbose=False)
    cases = []
    for group, texts in [("english", ENGLISH), ("code", CODE), ("numbers", NUMBERS),
                         ("unicode", UNICODE), ("special", SPECIAL), ("chat", CHAT),
                         ("random", random_texts(args.random))]:
        for text in texts:
            flags = [True, False] if "<" in text else [False]
            for special in flags:
                ids = llm.tokenize(text.encode("utf-8"), add_bos=False, special=special)
                back = llm.detokenize(ids, special=True).decode("utf-8")
                if back != text:
                    print(f"note: reference does not round-trip {text!r}: {back!r}", file=sys.stderr)
                cases.append({"group": group, "text": text, "parse_special": special, "ids": ids})
    doc = {
        "reference": f"llama-cpp-python {llama_cpp.__version__} (llama.cpp), vocab_only, "
                     "tokenize(add_bos=False, special=parse_special)",
        "model": os.path.basename(args.model),
        "cases": cases,
    }
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {len(cases)} cases to {args.out}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Writes tests/engine_io/data/chat_template_vectors.json: chat templates and the prompts that
Jinja renders from them, the way Hugging Face transformers does (sandboxed environment with
trim_blocks and lstrip_blocks). The C++ test renders the same conversations natively and compares.

Templates: SmolLM2's, read from the bundled GGUF; an abridged Qwen2.5-style ChatML template (its
default-system and tools branches); Meta-Llama-3-Instruct's template.

jinja2 is not a project dependency; scripts/setup_llama_reference.sh installs it (with gguf) into
.venv-llama (ignored by git):
  $(bash scripts/setup_llama_reference.sh | tail -n 1) scripts/gen_chat_template_vectors.py
"""
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

QWEN25_STYLE = (
    "{%- if tools %}\n"
    "    {{- '<|im_start|>system\\n' }}\n"
    "    {%- if messages[0]['role'] == 'system' %}\n"
    "        {{- messages[0]['content'] }}\n"
    "    {%- else %}\n"
    "        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}\n"
    "    {%- endif %}\n"
    "    {{- \"\\n\\n# Tools\\n\\n<tools>\" }}\n"
    "    {%- for tool in tools %}{{- \"\\n\" }}{{- tool | tojson }}{%- endfor %}\n"
    "    {{- \"\\n</tools><|im_end|>\\n\" }}\n"
    "{%- else %}\n"
    "    {%- if messages[0]['role'] == 'system' %}\n"
    "        {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}\n"
    "    {%- else %}\n"
    "        {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
    "assistant.<|im_end|>\\n' }}\n"
    "    {%- endif %}\n"
    "{%- endif %}\n"
    "{%- for message in messages %}\n"
    "    {%- if (message.role == \"user\") or (message.role == \"system\" and not loop.first) or "
    "(message.role == \"assistant\") %}\n"
    "        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}\n"
    "    {%- endif %}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n"
    "    {{- '<|im_start|>assistant\\n' }}\n"
    "{%- endif %}\n")

LLAMA3 = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
    "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + "
    "'<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
    "{{ content }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant"
    "<|end_header_id|>\n\n' }}{% endif %}")

CONVERSATIONS = [
    [{"role": "user", "content": "Hello!"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
    [{"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": "4."},
     {"role": "user", "content": "And 3+3?"}],
    [],
    [{"role": "user", "content": "  padded content with\nnewlines \n\n"}],
    [{"role": "user", "content": "\u00a0\u3000unicode edges\u2003"}],
    [{"role": "user", "content": "héllo 你好 😀"}, {"role": "assistant", "content": ""}],
    [{"role": "user", "content": "first"}, {"role": "system", "content": "late system"},
     {"role": "user", "content": "second"}],
    [{"role": "system", "content": ""}, {"role": "user", "content": "empty system"}],
]


def smollm_template():
    from gguf import GGUFReader
    r = GGUFReader(os.path.join(ROOT, "models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    return r.fields["tokenizer.chat_template"].contents()


def main():
    from jinja2.sandbox import ImmutableSandboxedEnvironment
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    templates = {"smollm2": smollm_template(), "qwen2.5-style": QWEN25_STYLE, "llama3": LLAMA3}
    cases = []
    for name, text in templates.items():
        tmpl = env.from_string(text)
        for messages in CONVERSATIONS:
            for gen in (True, False):
                try:
                    expected = tmpl.render(messages=messages, add_generation_prompt=gen,
                                           bos_token="<|begin_of_text|>", tools=None)
                except Exception as e:  # e.g. Qwen's template indexes messages[0]
                    print(f"skip {name} {messages}: {e}", file=sys.stderr)
                    continue
                cases.append({"template": name, "messages": messages,
                              "add_generation_prompt": gen, "expected": expected})
    out = os.path.join(ROOT, "tests/engine_io/data/chat_template_vectors.json")
    with open(out, "w", encoding="utf-8") as f:
        json.dump({"reference": "jinja2 ImmutableSandboxedEnvironment(trim_blocks, lstrip_blocks)",
                   "templates": templates, "cases": cases}, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {len(cases)} cases to {out}")


if __name__ == "__main__":
    main()

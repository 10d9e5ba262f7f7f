#!/usr/bin/env python3
# Writes chat-template-expected.jsonl: transformers' apply_chat_template output (the reference) for
# the chat templates of ../shared/data/tokenizers, on cases that cover single and multi-turn
# conversations, system messages, tool calls, an empty assistant turn, add_generation_prompt and a
# template that raises. chat-template-jinja-test.cpp renders the same cases with Spillway's renderer
# (engine/data/chat_template.py) and compares the text exactly.
#
# "trained" is not from transformers (it has a mask only for templates with {% generation %}
# blocks, and these have none): it is our renderer's spans, reviewed by hand when this file was
# written, kept so that a change to them is seen. Each is also checked for what it must hold:
# the assistant's content and the turn's closing token.
#
# Usage: python3 tests/engine/data/make_chat_expected.py DATA_DIR
#   (DATA_DIR: ../shared/data; needs transformers and jinja2, reference tools only)
import json
import os
import subprocess
import sys

from transformers import AutoTokenizer

HERE = os.path.dirname(os.path.abspath(__file__))
RENDERER = os.path.join(HERE, "..", "..", "..", "engine", "data", "chat_template.py")
# (name, tokenizer folder, template source): None takes the folder's own chat template. None of
# the three shipped templates raises on a bad role order, so the last one does: Llama-2-chat's
# alternation rule, written here, rendered with the Llama-2 tokenizer's special tokens (its BOS
# is written as text: "<s>").
ALTERNATING = """{%- for message in messages %}
{%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}
{{- raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}
{%- endif %}
{%- if message['role'] == 'user' %}
{{- bos_token + '[INST] ' + message['content'] | trim + ' [/INST]' }}
{%- elif message['role'] == 'assistant' %}
{{- ' ' + message['content'] | trim + ' ' + eos_token }}
{%- endif %}
{%- endfor %}
"""
TEMPLATES = [("llama3", "llama3", None), ("qwen2.5", "qwen2.5", None), ("qwen3", "qwen3", None),
             ("llama2-alternating", "llama2", ALTERNATING)]


def sharegpt_to_openai(example):
    """A ShareGPT example (glaive_toolcall) as transformers messages and tools, the conversion that
    engine/data/dataset-reader.cpp makes."""
    roles = {"human": "user", "gpt": "assistant", "system": "system"}
    messages = []
    for turn in example["conversations"]:
        if turn["from"] == "function_call":
            call = json.loads(turn["value"])
            messages.append({"role": "assistant", "content": "", "tool_calls": [
                {"type": "function",
                 "function": {"name": call["name"], "arguments": call.get("arguments", {})}}]})
        elif turn["from"] == "observation":
            messages.append({"role": "tool", "content": turn["value"]})
        else:
            messages.append({"role": roles[turn["from"]], "content": turn["value"]})
    tools = example.get("tools")
    if isinstance(tools, str):
        tools = json.loads(tools) if tools.strip() else None
    if tools:
        tools = [t if "type" in t else {"type": "function", "function": t} for t in tools]
    return messages, tools or None


def cases(data_dir):
    user = {"role": "user", "content": "What is the capital of France?"}
    reply = {"role": "assistant", "content": "The capital of France is Paris."}
    user2 = {"role": "user", "content": "And of Italy? Answer in one word."}
    reply2 = {"role": "assistant", "content": "Rome."}
    system = {"role": "system", "content": "You are a terse geography tutor."}
    glaive = json.load(open(os.path.join(data_dir, "datasets/sharegpt/glaive_toolcall_en_demo.json")))
    tool0, tools0 = sharegpt_to_openai(glaive[0])
    tool7, tools7 = sharegpt_to_openai(glaive[7])
    yield "single_turn", [user, reply], None, False
    yield "multi_turn", [user, reply, user2, reply2], None, False
    yield "system", [system, user, reply, user2, reply2], None, False
    yield "empty_assistant", [user, {"role": "assistant", "content": ""}], None, False
    yield "generation_prompt", [system, user], None, True
    yield "generation_prompt_multi_turn", [user, reply, user2], None, True
    yield "unicode", [{"role": "user", "content": "Übersetze: «naïve café» 🙂"},
                      {"role": "assistant", "content": "„naiver Kaffee“ 🙂 — 東京"}], None, False
    yield "reasoning", [user, {"role": "assistant", "content": "Paris.",
                               "reasoning_content": "France's capital is Paris."},
                        user2, {"role": "assistant", "content": "Rome.",
                                "reasoning_content": "Italy's capital is Rome."}], None, False
    yield "tool_calls_glaive_0", tool0, tools0, False
    yield "tool_calls_glaive_7", tool7, tools7, False
    yield "tool_calls_generation_prompt", tool7[:3], tools7, True
    # Invalid role orders: Qwen3 raises when no user message is found; Llama 3 when tools go into
    # a first user message that does not exist.
    yield "raises_no_user", [system, {"role": "assistant", "content": "Hello."}], tools0, False
    yield "raises_role_order", [user, user2, reply], None, False


def main():
    data_dir = sys.argv[1]
    out_path = os.path.join(HERE, "chat-template-expected.jsonl")
    lines = []
    for name, folder_name, source in TEMPLATES:
        folder = os.path.join(data_dir, "tokenizers", folder_name)
        tok = AutoTokenizer.from_pretrained(folder)
        variables = tok.special_tokens_map
        template = source or tok.chat_template
        ours = subprocess.Popen([sys.executable, RENDERER], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True)
        ours.stdin.write(json.dumps({"template": template, "variables": variables}) + "\n")
        ours.stdin.flush()
        assert json.loads(ours.stdout.readline()).get("ok"), name
        for case, messages, tools, agp in cases(data_dir):
            record = {"template": name, "tokenizer": folder_name, "case": case,
                      "messages": messages, "tools": tools, "add_generation_prompt": agp}
            if source:
                record["template_source"] = source
            try:
                record["text"] = tok.apply_chat_template(
                    messages, tools=tools, add_generation_prompt=agp, tokenize=False,
                    chat_template=template)
            except Exception as error:  # jinja2's TemplateError from raise_exception
                record["error"] = str(error)
            ours.stdin.write(json.dumps({"messages": messages, "tools": tools,
                                         "add_generation_prompt": agp}) + "\n")
            ours.stdin.flush()
            got = json.loads(ours.stdout.readline())
            if "text" in record:
                if got.get("text") != record["text"]:
                    print(f"{name} {case}: our text differs from transformers'", file=sys.stderr)
                record["trained"] = got.get("trained")
                # The ids transformers gives the whole text (add_special_tokens=False, as
                # apply_chat_template(tokenize=True)); Spillway encodes the same text cut at the
                # trained spans.
                record["input_ids"] = tok(record["text"], add_special_tokens=False)["input_ids"]
                for (s, e), m in zip(got.get("trained") or [],
                                     [m for m in messages if m["role"] == "assistant"]):
                    span = record["text"][s:e]
                    content = (m.get("content") or "").strip()
                    assert content in span, (name, case, span, content)
            else:
                if got.get("error") != record["error"]:
                    print(f"{name} {case}: our error differs: {got}", file=sys.stderr)
            lines.append(json.dumps(record, ensure_ascii=False))
        ours.stdin.close()
        ours.wait()
    with open(out_path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    print(f"wrote {len(lines)} cases to {out_path}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
# Compares `spillway-worker chat-template` with transformers' render_jinja_template on published
# chat templates (e.g. llama.cpp's verbatim copies, models/templates/*.jinja of its source), on the
# cases of make_chat_expected.py, and prints a Markdown table template x case: "equal", or the
# first difference. The templates are read in place and never copied.
#
# Usage: python3 tests/engine/data/compare_chat_templates.py DATA_DIR TEMPLATES_DIR WORKER
#   (needs transformers; a reference tool, not part of the tests)
import json
import os
import subprocess
import sys
import tempfile

from transformers.utils.chat_template_utils import render_jinja_template

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_chat_expected import cases  # noqa: E402

# Special tokens per family, guessed from the file name; both renderers get the same ones.
TOKENS = [
    ("llama-3", {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}),
    ("Llama-3", {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}),
    ("Qwen", {"eos_token": "<|im_end|>"}),
    ("gemma", {"bos_token": "<bos>", "eos_token": "<eos>"}),
    ("Phi", {"bos_token": "<s>", "eos_token": "<|endoftext|>"}),
    ("deepseek", {"bos_token": "<｜begin▁of▁sentence｜>", "eos_token": "<｜end▁of▁sentence｜>"}),
]
DEFAULT_TOKENS = {"bos_token": "<s>", "eos_token": "</s>"}


def tokens_for(name):
    for key, tokens in TOKENS:
        if key in name:
            return tokens
    return DEFAULT_TOKENS


def first_difference(ours, theirs):
    n = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), min(len(ours), len(theirs)))
    return f"at char {n}: ours {ours[n:n + 30]!r} vs transformers {theirs[n:n + 30]!r}"


def check_spans(mine, messages):
    """"equal", or what is wrong with the trained spans: each assistant reply's content must lie
    in one span, and no span may hold a user's or a tool's content."""
    spans = [mine["text"][s:e] for s, e in mine["trained"]]
    for m in messages:
        content = m.get("content")
        if not isinstance(content, str) or not content.strip():
            continue
        inside = any(content.strip() in span for span in spans)
        if m["role"] == "assistant" and not inside and content.strip() in mine["text"]:
            return f"equal text; reply {content.strip()[:30]!r} not trained"
        if m["role"] in ("user", "tool") and inside:
            return f"equal text; {m['role']} {content.strip()[:30]!r} trained"
    return "equal"


def reference(source, tokens, messages, tools, agp):
    try:
        texts, _ = render_jinja_template(conversations=[messages], tools=tools, chat_template=source,
                                         add_generation_prompt=agp, **tokens)
        return {"text": texts[0]}
    except Exception as error:
        return {"error": str(error) or type(error).__name__}


def ours(worker, folder, lines, agp):
    argv = [worker, "chat-template", "--model", folder] + (["--add-generation-prompt"] if agp else [])
    run = subprocess.run(argv, input="".join(lines), capture_output=True, text=True)
    if run.returncode != 0:
        return [{"fatal": run.stderr.strip()}] * len(lines)
    return [json.loads(line) for line in run.stdout.splitlines()]


def main():
    data_dir, templates_dir, worker = sys.argv[1:4]
    all_cases = list(cases(data_dir))
    names = [c[0] for c in all_cases]
    print("| template | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    summary = {"equal": 0, "cells": 0}
    for file in sorted(os.listdir(templates_dir)):
        if not file.endswith(".jinja"):
            continue
        source = open(os.path.join(templates_dir, file), encoding="utf-8").read()
        tokens = tokens_for(file)
        with tempfile.TemporaryDirectory() as folder:
            with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
                json.dump({"chat_template": source, **tokens}, f)
            got = {}
            for agp in (False, True):
                picked = [c for c in all_cases if c[3] == agp]
                lines = [json.dumps({"messages": m, "tools": t}) + "\n" for _, m, t, _ in picked]
                for c, r in zip(picked, ours(worker, folder, lines, agp)):
                    got[c[0]] = r
        cells = []
        for name, messages, tools, agp in all_cases:
            want = reference(source, tokens, messages, tools, agp)
            mine = got[name]
            summary["cells"] += 1
            if "fatal" in mine:
                cell = "ours failed: " + mine["fatal"][:80]
            elif "text" in want and "text" in mine:
                cell = "equal" if mine["text"] == want["text"] else first_difference(mine["text"], want["text"])
                if cell == "equal":
                    cell = check_spans(mine, messages)
            elif "error" in want and "error" in mine:
                cell = "equal (both raise)" if mine["error"] == want["error"] else \
                    f"both raise: ours {mine['error'][:60]!r} vs {want['error'][:60]!r}"
            elif "error" in mine:
                cell = "ours: " + mine["error"][:90]
            else:
                cell = "transformers raises: " + want["error"][:80]
            if cell.startswith("equal"):
                summary["equal"] += 1
            cells.append(cell.replace("|", "\\|").replace("\n", "\\n"))
        print(f"| {file[:-6]} | " + " | ".join(cells) + " |")
    print(f"\n{summary['equal']} of {summary['cells']} cells equal", file=sys.stderr)


if __name__ == "__main__":
    main()

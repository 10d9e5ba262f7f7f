#!/usr/bin/env python3
"""Does a metadata key of a GGUF file matter? llama.cpp's logits of a prompt on the file as written
and with each KEY=VALUE overridden (llama_cpp.Llama's kv_overrides), against Spillway's logits of
the same prompt (`spillway-worker generate --logits`, CPU); run by hand outside CI:

    python3 tests/gguf/override_sensitivity.py --worker build/app/spillway-worker \
        --model RUN/export --gguf OUT/model.gguf --prompt TEXT \
        gemma3.attention.sliding_window=4096 gemma3.rope.freq_base_swa=1e6

A key the round trip covers moves the relative L2 far above the file's own (roundtrip.py's figure).
VALUE is read as an integer, else a float, else true/false, else a string.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np


def parse(value):
    for cast in (int, float):
        try:
            return cast(value)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(value, value)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--worker", required=True)
    ap.add_argument("--model", required=True, help="Spillway's Hugging Face export")
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--prompt", required=True)
    ap.add_argument("overrides", nargs="*", metavar="KEY=VALUE")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "logits.f32")
        res = subprocess.run([a.worker, "generate", "--model", a.model, "--prompt", a.prompt,
                              "--max-new-tokens", "1", "--backend", "cpu", "--logits", path,
                              "--json"], capture_output=True, text=True, check=True)
        gen = json.loads(res.stdout.strip().splitlines()[-1])
        ours = np.fromfile(path, dtype=np.float32).reshape(gen["prompt_tokens"], -1)
    ids = gen["ids"][:gen["prompt_tokens"]]

    import llama_cpp
    for spec in [None] + a.overrides:
        kv = None
        if spec:
            key, _, value = spec.partition("=")
            kv = {key: parse(value)}
        llm = llama_cpp.Llama(model_path=a.gguf, logits_all=True, n_ctx=len(ids) + 8, n_threads=2,
                              verbose=False, kv_overrides=kv)
        llm.eval(ids)
        theirs = np.array(llm.scores[:len(ids), :llm.n_vocab()], dtype=np.float32)
        rel = float(np.linalg.norm(theirs - ours) / np.linalg.norm(ours))
        print(f"{spec or 'as written'}: rel L2 {rel:.3e}", flush=True)
        del llm
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""The GGUF round trip through a real llama.cpp (llama-cpp-python), run by hand outside CI:

    python3 tests/gguf/roundtrip.py --worker build/app/spillway-worker --model HF_EXPORT_DIR \
        --gguf OUT/model.gguf --prompt "Once upon a time" [--max-rel-l2 0.01]

Spillway's side is `spillway-worker generate` on the Hugging Face export of the same checkpoint
(greedy, 32 new tokens, --logits for the prompt's logits, CPU backend); llama.cpp's is
llama_cpp.Llama(logits_all=True) on the GGUF. Checks: llama.cpp tokenizes the prompt to the same
ids; the prompt's logits agree within --max-rel-l2 (relative L2 over all positions and the whole
vocabulary); greedy decoding from those ids gives the same first 32 tokens (or fewer when both
stop at EOS). For Q8_0, whose logits move by up to a few hundredths, greedy decoding may part at a
step where two tokens are that close: the check then holds when llama.cpp's margin between its
token and Spillway's at that step is within the largest logit difference seen on the prompt (the
quantization's own error), and says so. Prints the figures; exit 0 when every check holds.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--worker", required=True)
    ap.add_argument("--model", required=True, help="Spillway's Hugging Face export")
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--prompt", required=True)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--max-rel-l2", type=float, default=None,
                    help="default by the file's type: F16 1e-3, BF16 5e-3, Q8_0 2e-2")
    a = ap.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        logits_path = os.path.join(tmp, "logits.f32")
        res = subprocess.run(
            [a.worker, "generate", "--model", a.model, "--prompt", a.prompt, "--max-new-tokens",
             str(a.new_tokens), "--backend", "cpu", "--logits", logits_path, "--json"],
            capture_output=True, text=True, check=True)
        gen = json.loads(res.stdout.strip().splitlines()[-1])
        ours_logits = np.fromfile(logits_path, dtype=np.float32)
    ids = gen["ids"]
    n_prompt = gen["prompt_tokens"]
    prompt_ids, ours_new = ids[:n_prompt], ids[n_prompt:]
    ours_logits = ours_logits.reshape(n_prompt, -1)

    import llama_cpp
    llm = llama_cpp.Llama(model_path=a.gguf, logits_all=True, n_ctx=n_prompt + a.new_tokens + 8,
                          n_threads=2, verbose=False, seed=0)
    file_type = int(llm.metadata.get("general.file_type", "1"))
    type_name = {0: "F32", 1: "F16", 7: "Q8_0", 32: "BF16"}.get(file_type, str(file_type))
    bound = a.max_rel_l2 or {1: 1e-3, 32: 5e-3, 7: 2e-2}.get(file_type, 1e-3)
    ok = True
    theirs_prompt = llm.tokenize(a.prompt.encode(), add_bos=True, special=False)
    same_ids = theirs_prompt == prompt_ids
    ok &= same_ids
    print(f"prompt: {a.prompt!r}: {n_prompt} tokens; llama.cpp tokenizes it "
          f"{'the same' if same_ids else 'differently: ' + str(theirs_prompt) + ' vs ' + str(prompt_ids)}")

    llm.eval(prompt_ids)
    n_vocab = llm.n_vocab()
    theirs_logits = np.array(llm.scores[:n_prompt, :n_vocab], dtype=np.float32)
    if theirs_logits.shape != ours_logits.shape:
        print(f"logits shapes differ: llama.cpp {theirs_logits.shape}, Spillway {ours_logits.shape}")
        return 1
    rel = float(np.linalg.norm(theirs_logits - ours_logits) / np.linalg.norm(ours_logits))
    max_abs = float(np.abs(theirs_logits - ours_logits).max())
    argmax_same = int((theirs_logits.argmax(-1) == ours_logits.argmax(-1)).sum())
    ok &= rel <= bound
    print(f"{type_name} logits [{n_prompt} x {n_vocab}]: rel L2 {rel:.3e} (bound {bound:g}), "
          f"max |diff| {max_abs:.3e}, argmax equal at {argmax_same}/{n_prompt} positions")

    eos = llm.token_eos()
    theirs_new, margins = [], []
    for _ in range(a.new_tokens):
        row = llm.scores[llm.n_tokens - 1, :n_vocab]
        tok = int(np.argmax(row))
        k = len(theirs_new)
        if k < len(ours_new):
            margins.append(float(row[tok] - row[ours_new[k]]))
        theirs_new.append(tok)
        if tok == eos:
            break
        llm.eval([tok])
    same = theirs_new == ours_new
    if same:
        print(f"greedy {len(ours_new)} new tokens: equal")
    else:
        k = next((i for i in range(min(len(ours_new), len(theirs_new)))
                  if ours_new[i] != theirs_new[i]), min(len(ours_new), len(theirs_new)))
        explained = file_type == 7 and k < len(margins) and margins[k] <= max_abs
        print(f"greedy {len(ours_new)} new tokens: equal for the first {k}, then llama.cpp takes "
              f"{theirs_new[k] if k < len(theirs_new) else 'EOS'} where Spillway takes "
              f"{ours_new[k] if k < len(ours_new) else 'EOS'}"
              + (f", {margins[k]:.3e} apart in llama.cpp's logits" if k < len(margins) else "")
              + (f": within Q8_0's logit error ({max_abs:.3e} on the prompt)" if explained else ""))
        same = explained
    ok &= same
    print(f"  Spillway : {ours_new}")
    print(f"  llama.cpp: {theirs_new}")
    print(f"  text: {llm.detokenize(theirs_new).decode('utf-8', 'replace')!r}")
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""The bf16 floor of the golden gradient check: how far PyTorch's own bf16 training gets from the
float64 gradients of ../shared/data/golden/<case>/forward_backward, per tensor (relative L2).

Two bf16 modes, as trainers run them: "pure" (weights and every activation in bf16, the residual
stream too, as Spillway's CUDA backend and MegaTrain do) and "amp" (fp32 weights and residual
stream, matmuls under torch.autocast(bfloat16), as torch_native.py does). Prints one JSON line
per case and mode: logits and loss error, the worst tensor, and how many tensors exceed 2e-2.

Usage: python3 tests/bench/torch_bf16_gradient_floor.py DATA_DIR [CASE...]   (torch, transformers
and safetensors; a CUDA GPU, else the CPU's bf16). A CASE the repository holds (tests/golden/<case>,
its model in <case>/model) is read from there, as the golden tests read it.
"""
import json
import os
import sys

import torch
import torch.nn.functional as F
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM


def rel_l2(x, ref):
    x, ref = x.double(), ref.double()
    return ((x - ref).norm() / ref.norm().clamp_min(1e-300)).item()


REPO_GOLDEN = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "golden")


def run(data, case, mode):
    folder, model_dir = f"{data}/golden/{case}", f"{data}/models/{case}"
    if os.path.isfile(f"{REPO_GOLDEN}/{case}/meta.json"):
        folder = model_dir = f"{REPO_GOLDEN}/{case}"
        model_dir += "/model"
    fb = load_file(f"{folder}/forward_backward.safetensors")
    meta = json.load(open(f"{folder}/meta.json"))
    dtype = torch.bfloat16 if mode == "pure" else torch.float32
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=dtype,
                                                 attn_implementation="sdpa").to(device)
    model.train()
    ids, labels = fb["input_ids"].long().to(device), fb["labels"].long().to(device)
    with torch.autocast(device, dtype=torch.bfloat16, enabled=(mode == "amp")):
        logits = model(input_ids=ids).logits
    loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=-100)
    loss.backward()
    errs = {}
    for name, p in model.named_parameters():
        key = f"grad.{name}"
        if key in fb:
            errs[name] = rel_l2(p.grad.float().cpu(), fb[key])
    worst = max(errs, key=errs.get)
    return dict(case=case, mode=mode, logits_rel_l2=rel_l2(logits.float().cpu(), fb["logits"]),
                loss=loss.item(), ref_loss=meta["loss"], worst_grad=worst, worst_grad_rel_l2=errs[worst],
                tensors_over_2e_2=sum(e > 2e-2 for e in errs.values()), tensors=len(errs))


if __name__ == "__main__":
    data = sys.argv[1]
    for case in sys.argv[2:] or ["stories260K", "llama-mha-tiny", "qwen2-tiny"]:
        for mode in ("pure", "amp"):
            print(json.dumps(run(data, case, mode)), flush=True)

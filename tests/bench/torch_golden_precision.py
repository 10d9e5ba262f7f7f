#!/usr/bin/env python3
"""How close can a float32 trainer get to the float64 golden AdamW trajectory?

Replays ../shared/data/golden/<case>/adamw_trajectory (the 4 AdamW steps of the golden test) with
PyTorch on the CPU, in float64 (to check that this script reads the reference's semantics right)
and in float32 (eager and SDPA attention), and prints, per case and precision, the worst step-loss
difference, the whole-model relative L2 error and every tensor above 1e-4 relative L2, the bound
that tests/engine/train/golden-test.cpp holds Spillway's float32 engine to.

Usage: python3 tests/bench/torch_golden_precision.py DATA_DIR [CASE...]
Needs torch, transformers and safetensors.
"""
import json
import sys

import torch
import torch.nn.functional as F
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM


def rel_l2(x, ref):
    x, ref = x.double(), ref.double()
    return ((x - ref).norm() / ref.norm().clamp_min(1e-300)).item()


def replay(data, case, dtype, attn):
    """The 4 AdamW steps of adamw_trajectory, compared step by step and tensor by tensor."""
    meta = json.load(open(f"{data}/golden/{case}/meta.json"))
    traj = load_file(f"{data}/golden/{case}/adamw_trajectory.safetensors")
    h = meta["adamw"]
    model = AutoModelForCausalLM.from_pretrained(f"{data}/models/{case}", torch_dtype=dtype,
                                                 attn_implementation=attn)
    model.train()
    params = dict(model.named_parameters())
    decay = [p for p in params.values() if p.ndim >= 2]
    no_decay = [p for p in params.values() if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": h["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=h["lr"], betas=(h["beta1"], h["beta2"]), eps=h["eps"])

    def loss_of(s):
        ids = traj[f"batch{s}.input_ids"].long()
        labels = traj[f"batch{s}.labels"].long()
        logits = model(input_ids=ids).logits
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=-100)

    worst_loss = 0.0
    for s in range(h["steps"]):
        opt.zero_grad()
        loss = loss_of(s)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), h["clip_grad_norm"])
        opt.step()
        worst_loss = max(worst_loss, abs(loss.item() - meta["step_losses"][s]))
    with torch.no_grad():
        after = abs(loss_of(h["steps"]).item() - meta["loss_after"])
    num = den = 0.0
    loose = []
    for name, p in params.items():
        ref = traj[name]
        e = rel_l2(p.detach(), ref)
        num += ((p.detach().double() - ref.double()) ** 2).sum().item()
        den += (ref.double() ** 2).sum().item()
        if e >= 1e-4:
            loose.append((name, e))
    print(f"{case:15s} {str(dtype):14s} {attn:6s} step-loss |diff| max {worst_loss:.2e}  "
          f"loss_after |diff| {after:.2e}  model rel L2 {(num / den) ** 0.5:.2e}  "
          f"tensors >= 1e-4: {len(loose)} of {len(params)}")
    for name, e in loose:
        print(f"    {name}  {e:.3e}")


def gradients(data, case, dtype, attn):
    """Per-tensor relative L2 of one forward/backward's gradients against forward_backward."""
    fb = load_file(f"{data}/golden/{case}/forward_backward.safetensors")
    model = AutoModelForCausalLM.from_pretrained(f"{data}/models/{case}", torch_dtype=dtype,
                                                 attn_implementation=attn)
    logits = model(input_ids=fb["input_ids"].long()).logits
    F.cross_entropy(logits.reshape(-1, logits.shape[-1]), fb["labels"].long().reshape(-1),
                    ignore_index=-100).backward()
    errs = sorted(rel_l2(p.grad, fb["grad." + n]) for n, p in model.named_parameters())
    print(f"{case:15s} {str(dtype):14s} {attn:6s} gradient rel L2: median {errs[len(errs) // 2]:.2e}  "
          f"worst {errs[-1]:.2e}  logits {rel_l2(logits.detach(), fb['logits']):.2e}")


def main():
    data = sys.argv[1]
    cases = sys.argv[2:] or ["stories260K", "qwen2-tiny", "llama-mha-tiny"]
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    for case in cases:
        gradients(data, case, torch.float64, "eager")
        gradients(data, case, torch.float32, "eager")
        replay(data, case, torch.float64, "eager")
        for attn in ("eager", "sdpa"):
            replay(data, case, torch.float32, attn)


if __name__ == "__main__":
    main()

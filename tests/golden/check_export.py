#!/usr/bin/env python3
"""Does transformers load a model folder (a Spillway export) as the golden case's model?

  check_export.py check MODEL_DIR CASE [--trained] [--dtype float64|float32]
      Loads MODEL_DIR with AutoModelForCausalLM.from_pretrained (eager attention) and prints its
      loss beside the golden loss and the relative L2 error of its logits against the reference.
      Without --trained, MODEL_DIR holds the case's initial weights (its model folder, or an
      export of a checkpoint before any step): batch 0 against forward_backward's logits and
      meta.json's `loss`. With --trained, it holds the weights after the case's AdamW steps
      (`steps` golden steps trained by Spillway, then exported): batch{steps} against the
      reference model with adamw_trajectory's parameters and meta.json's `loss_after`.
      Exit 0 when the loss is within --loss-tol (default 1e-5, the float32 bound of
      ../shared/data/README.md; 2e-2 suits a bf16 export) and the logits within --logits-tol
      (default 1e-4), and no weight of MODEL_DIR was missing, unexpected or misshapen
      (transformers would otherwise initialise it at random and still load); 1 otherwise.

  check_export.py job CASE OUT_DIR
      Writes OUT_DIR/golden.jsonl (the case's batches as pre-tokenized rows) and OUT_DIR/job.json,
      a spillway-worker job that trains the case's AdamW steps from its model folder with its
      hyper-parameters into OUT_DIR/run, which the worker exports at the end to OUT_DIR/run/export.
      Then:
        spillway-worker train OUT_DIR/job.json
        check_export.py check OUT_DIR/run/export CASE --trained

CASE is a folder of tests/golden (qwen3-tiny, ...) or of $SPILLWAY_DATA_DIR/golden (default
../shared/data next to the repository: stories260K, qwen2-tiny, llama-mha-tiny), or a path to a
golden folder. Needs torch, transformers and safetensors; a reference tool, not part of Spillway.
"""
import argparse
import json
import os
import sys

import torch
import torch.nn.functional as F
from safetensors.torch import load_file

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def resolve_case(case):
    """(golden folder, model folder) of a case, as testing::golden_case resolves it."""
    if os.path.isfile(os.path.join(case, "meta.json")):
        golden = os.path.abspath(case)
        model = os.path.join(golden, "model")
        if not os.path.isdir(model):  # a shared golden folder: DATA/golden/NAME -> DATA/models/NAME
            model = os.path.join(os.path.dirname(os.path.dirname(golden)), "models",
                                 os.path.basename(golden))
        return golden, model
    repo = os.path.join(HERE, case)
    if os.path.isfile(os.path.join(repo, "meta.json")):
        return repo, os.path.join(repo, "model")
    data = os.path.normpath(os.environ.get("SPILLWAY_DATA_DIR")
                            or os.path.join(REPO, "..", "shared", "data"))
    shared = os.path.join(data, "golden", case)
    if os.path.isfile(os.path.join(shared, "meta.json")):
        return shared, os.path.join(data, "models", case)
    sys.exit(f"no golden case {case!r}: neither {repo} nor {shared} holds a meta.json "
             f"(set SPILLWAY_DATA_DIR for the shared cases, or give a golden folder's path)")


def load(model_dir, dtype):
    from transformers import AutoModelForCausalLM
    model, info = AutoModelForCausalLM.from_pretrained(
        model_dir, dtype=dtype, attn_implementation="eager", output_loading_info=True)
    model.eval()
    return model, info


def loss_and_logits(model, ids, labels):
    with torch.no_grad():
        logits = model(input_ids=ids.long()).logits
    loss = F.cross_entropy(logits.double().reshape(-1, logits.shape[-1]), labels.long().reshape(-1),
                           ignore_index=-100)
    return loss.item(), logits.double()


def rel_l2(x, ref):
    x, ref = x.double(), ref.double()
    return ((x - ref).norm() / ref.norm().clamp_min(1e-300)).item()


def check(args):
    golden, case_model = resolve_case(args.case)
    meta = json.load(open(os.path.join(golden, "meta.json")))
    dtype = {"float64": torch.float64, "float32": torch.float32}[args.dtype]
    model, info = load(args.model_dir, dtype)
    problems = [f"{k}: {', '.join(map(str, v))}" for k, v in info.items()
                if k in ("missing_keys", "unexpected_keys", "mismatched_keys") and v]
    if args.trained:
        traj = load_file(os.path.join(golden, "adamw_trajectory.safetensors"))
        s = meta["adamw"]["steps"]
        ids, labels = traj[f"batch{s}.input_ids"], traj[f"batch{s}.labels"]
        # The reference: the case's model with the trajectory's parameters, in float64.
        ref_model, _ = load(case_model, torch.float64)
        missing, unexpected = ref_model.load_state_dict(
            {k: v for k, v in traj.items() if not k.startswith("batch")}, strict=False)
        assert not unexpected and all("lm_head" in k for k in missing), (missing, unexpected)
        _, ref_logits = loss_and_logits(ref_model, ids, labels)
        ref_loss, what = meta["loss_after"], f"batch{s} after {s} AdamW steps (loss_after)"
    else:
        fb = load_file(os.path.join(golden, "forward_backward.safetensors"))
        ids, labels, ref_logits = fb["input_ids"], fb["labels"], fb["logits"]
        ref_loss, what = meta["loss"], "batch 0 (loss)"
    loss, logits = loss_and_logits(model, ids, labels)
    err = rel_l2(logits, ref_logits)
    print(f"{args.model_dir}: {type(model).__name__} in {args.dtype}, case {meta['case']}, {what}")
    print(f"  loss {loss:.8f}   golden {ref_loss:.8f}   |diff| {abs(loss - ref_loss):.2e} "
          f"(tolerance {args.loss_tol:g})")
    print(f"  logits rel L2 {err:.2e} (tolerance {args.logits_tol:g})")
    for p in problems:
        print(f"  weights not as the model expects: {p}")
    ok = abs(loss - ref_loss) <= args.loss_tol and err <= args.logits_tol and not problems
    print("  OK" if ok else "  MISMATCH")
    return 0 if ok else 1


def job(args):
    golden, case_model = resolve_case(args.case)
    meta = json.load(open(os.path.join(golden, "meta.json")))
    traj = load_file(os.path.join(golden, "adamw_trajectory.safetensors"))
    h, B, T = meta["adamw"], meta["B"], meta["T"]
    out = os.path.abspath(args.out_dir)
    os.makedirs(out, exist_ok=True)
    # Pre-tokenized rows in the Hugging Face convention (labels aligned with input_ids, the model
    # shifts): one extra id at the end carries the last target, as tests/app/worker-test.cpp does.
    with open(os.path.join(out, "golden.jsonl"), "w") as f:
        for s in range(h["steps"]):
            ids, labels = traj[f"batch{s}.input_ids"], traj[f"batch{s}.labels"]
            for b in range(B):
                row = {"input_ids": ids[b].tolist() + [0], "labels": [-100] + labels[b].tolist()}
                f.write(json.dumps(row) + "\n")
    job = {
        "name": f"golden-{meta['case']}",
        "model": {"path": os.path.abspath(case_model)},
        "data": {"train": os.path.join(out, "golden.jsonl"), "format": "pretokenized",
                 "seq_len": T, "shuffle": False},
        "train": {"steps": h["steps"], "micro_batch_size": B, "grad_accum": 1, "lr": h["lr"],
                  "schedule": "constant", "beta1": h["beta1"], "beta2": h["beta2"], "eps": h["eps"],
                  "weight_decay": h["weight_decay"], "clip_grad_norm": h["clip_grad_norm"]},
        "placement": {"backend": "cpu"},
        "output": {"run_dir": os.path.join(out, "run")},
    }
    with open(os.path.join(out, "job.json"), "w") as f:
        json.dump(job, f, indent=2)
        f.write("\n")
    print(f"wrote {out}/job.json and golden.jsonl; then:\n"
          f"  spillway-worker train {out}/job.json\n"
          f"  {sys.argv[0]} check {out}/run/export {args.case} --trained")
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("check", help="compare a model folder with a golden case")
    c.add_argument("model_dir")
    c.add_argument("case")
    c.add_argument("--trained", action="store_true",
                   help="MODEL_DIR holds the weights after the case's AdamW steps")
    c.add_argument("--dtype", choices=["float64", "float32"], default="float64")
    c.add_argument("--loss-tol", type=float, default=1e-5)
    c.add_argument("--logits-tol", type=float, default=1e-4)
    j = sub.add_parser("job", help="write a spillway-worker job that trains the case's steps")
    j.add_argument("case")
    j.add_argument("out_dir")
    args = p.parse_args()
    return check(args) if args.command == "check" else job(args)


if __name__ == "__main__":
    sys.exit(main())

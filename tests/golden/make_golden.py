#!/usr/bin/env python3
"""PyTorch reference ("golden") data for the model families of tests/golden: Qwen3, Gemma 3 (text)
and Phi-3/Phi-4 (with and without LongRoPE).

For each case it builds a tiny randomly initialised model with transformers (fixed seed), saves it
as a Hugging Face folder (tests/golden/<case>/model: config.json and model.safetensors in float32,
via save_pretrained), reloads that folder in float64 with eager attention and writes, in the format
of ../shared/data/golden (../shared/data/README.md):

- forward_backward.safetensors: input_ids, labels, logits and grad.<hf name> of batch 0;
- adamw_trajectory.safetensors: every parameter after `steps` AdamW steps and batch{s}.*;
- meta.json: B, T, loss, gradient norm, AdamW hyper-parameters, step losses and pre-clip norms,
  loss_after, notes, and the case's own notes (what it exercises) and the tool versions.

Semantics (as the shared goldens): labels are already shifted; -100 is ignored; loss is the mean
cross-entropy over non-ignored targets; decoupled weight decay only on tensors with ndim >= 2;
global-norm gradient clipping before each step; constant learning rate (torch.optim.AdamW with
torch.nn.utils.clip_grad_norm_).

Usage: python3 tests/golden/make_golden.py [CASE...]   (all cases by default; run from anywhere)
Needs torch, transformers and safetensors. A reference tool: never a dependency of Spillway or CI.
"""
import json
import math
import os
import shutil
import sys

import torch
import torch.nn.functional as F
import transformers
from safetensors.torch import save_file
from transformers import (AutoModelForCausalLM, Gemma3ForCausalLM, Gemma3TextConfig, LlamaConfig,
                          LlamaForCausalLM, Phi3Config, Phi3ForCausalLM, Qwen3Config,
                          Qwen3ForCausalLM)

HERE = os.path.dirname(os.path.abspath(__file__))

# The hyper-parameters of ../shared/data/golden/qwen2-tiny and llama-mha-tiny.
ADAMW_QWEN2 = {"lr": 1e-3, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "weight_decay": 0.1,
               "clip_grad_norm": 1.0, "steps": 4}
ADAMW_LLAMA_MHA = {"lr": 3e-3, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "weight_decay": 0.0,
                   "clip_grad_norm": 0.5, "steps": 4}

NOTES = ("labels are already shifted: labels[b,t] is the target of position t; -100 is ignored. "
         "Loss = mean cross-entropy over non-ignored targets. Weight decay (decoupled, AdamW) applies "
         "only to tensors with ndim >= 2. Gradients are clipped to global L2 norm clip_grad_norm over "
         "all parameters before each step. Step s uses batch{s}; loss_after is the loss on "
         "batch{steps} after the last step. Reference computed in float64 from the float32 weights "
         "in the model folder (transformers, attn_implementation=eager); stored as float32.")

# Weights are drawn wider than transformers' 0.02 default so that attention is far from uniform
# (masks, RoPE and the attention scale change the result measurably), and every norm weight is
# perturbed (a swapped q_norm/k_norm or a missing Gemma "1 +" shows up).
INIT_STD = 0.1


def qwen3_case():
    config = Qwen3Config(
        vocab_size=384, hidden_size=48, intermediate_size=96, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=32, hidden_act="silu",
        max_position_embeddings=512, rms_norm_eps=1e-6, rope_theta=1000000.0,
        tie_word_embeddings=False, attention_bias=False, use_sliding_window=False,
        initializer_range=INIT_STD, bos_token_id=None, eos_token_id=None, pad_token_id=None)
    return {"model_class": Qwen3ForCausalLM, "config": config, "B": 3, "T": 48,
            "adamw": ADAMW_QWEN2,
            "case_notes": "Qwen3: per-head RMSNorm q_norm/k_norm (over head_dim, before RoPE), "
                          "head_dim 32 given explicitly != hidden_size/num_attention_heads (12), "
                          "GQA 4 query / 2 key-value heads, no attention bias, untied lm_head."}


def gemma3_case():
    config = Gemma3TextConfig(
        vocab_size=256, hidden_size=32, intermediate_size=64, num_hidden_layers=3,
        num_attention_heads=2, num_key_value_heads=1, head_dim=256,
        hidden_activation="gelu_pytorch_tanh", max_position_embeddings=1024, rms_norm_eps=1e-6,
        query_pre_attn_scalar=64, sliding_window=8, sliding_window_pattern=2,
        rope_theta=1000000.0, rope_local_base_freq=10000.0,
        rope_scaling={"rope_type": "linear", "factor": 8.0},
        attn_logit_softcapping=None, final_logit_softcapping=None, tie_word_embeddings=True,
        attention_bias=False, initializer_range=INIT_STD, pad_token_id=0, bos_token_id=2,
        eos_token_id=1)
    assert config.layer_types == ["sliding_attention", "full_attention", "sliding_attention"]
    return {"model_class": Gemma3ForCausalLM, "config": config, "B": 2, "T": 32,
            "adamw": ADAMW_QWEN2,
            "case_notes": "Gemma 3 text: head_dim 256 with 2 query / 1 key-value heads and hidden "
                          "size 32; embeddings scaled by sqrt(hidden_size); RMSNorm weights are "
                          "(1 + w); q_norm/k_norm; pre- and post-norms around attention and MLP; "
                          "GeGLU with gelu_pytorch_tanh; attention scale query_pre_attn_scalar^-0.5 "
                          "= 64^-0.5 (not head_dim^-0.5); layer_types [sliding, full, sliding] "
                          "(sliding_window_pattern 2); sliding_window 8 < T (a sliding layer's "
                          "query at position t sees keys t-7..t); sliding layers use RoPE theta "
                          "rope_local_base_freq 10000 unscaled, full layers theta 1e6 with linear "
                          "scaling factor 8 (positions divided by 8); tied embeddings; no softcapping. "
                          "Input ids avoid pad_token_id 0 (transformers' nn.Embedding padding_idx "
                          "gives that row no gradient from the lookup)."}


def phi3_case():
    config = Phi3Config(
        vocab_size=320, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, hidden_act="silu",
        max_position_embeddings=512, original_max_position_embeddings=512, rms_norm_eps=1e-5,
        rope_theta=10000.0, rope_scaling=None, sliding_window=None, tie_word_embeddings=False,
        initializer_range=INIT_STD, bos_token_id=None, eos_token_id=None, pad_token_id=None)
    return {"model_class": Phi3ForCausalLM, "config": config, "B": 3, "T": 48,
            "adamw": ADAMW_QWEN2,
            "case_notes": "Phi-3: fused qkv_proj (rows: q, then k, then v) and gate_up_proj (rows: "
                          "gate, then up); head_dim = hidden_size/num_attention_heads = 16; GQA 4 "
                          "query / 2 key-value heads; plain RoPE (rope_scaling null); no sliding "
                          "window; untied lm_head."}


def phi3_longrope_case():
    # Phi-4-mini's shape of configuration: LongRoPE, partial_rotary_factor 0.75, GQA, tied
    # embeddings. rotary dim = 16 * 0.75 = 12, so 6 factors each.
    short_factor = [1.0, 1.25, 1.5, 2.0, 3.0, 5.0]
    long_factor = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0]
    config = Phi3Config(
        vocab_size=320, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, hidden_act="silu",
        max_position_embeddings=1024, original_max_position_embeddings=64, rms_norm_eps=1e-5,
        rope_theta=10000.0, partial_rotary_factor=0.75,
        rope_scaling={"rope_type": "longrope", "short_factor": short_factor,
                      "long_factor": long_factor},
        sliding_window=256, tie_word_embeddings=True, initializer_range=INIT_STD,
        bos_token_id=None, eos_token_id=None, pad_token_id=None)
    return {"model_class": Phi3ForCausalLM, "config": config, "B": 2, "T": 48,
            "adamw": ADAMW_LLAMA_MHA,
            "case_notes": "Phi-3/Phi-4 LongRoPE (as Phi-3-*-128k and Phi-4-mini): rope_scaling "
                          "longrope with 6 short and 6 long factors; partial_rotary_factor 0.75, so "
                          "RoPE rotates the first 12 of each head's 16 dimensions (rotate-half "
                          "pairs within those 12) and passes the last 4 through. "
                          "T = 48 <= original_max_position_embeddings = 64, so transformers uses "
                          "short_factor here (long_factor only when the sequence is longer than "
                          "64): inv_freq[i] = 1 / (short_factor[i] * 10000^(2i/12)). "
                          "max_position_embeddings 1024 / original 64 = scale 16, so cos and sin are "
                          "multiplied by the attention factor sqrt(1 + ln(16)/ln(64)) = "
                          f"{math.sqrt(1 + math.log(16) / math.log(64)):.16f} (at every length). "
                          "sliding_window 256 >= T "
                          "(no effect here). Tied embeddings (as Phi-4-mini)."}


def llama_long_case():
    # Long context (issue 25: a golden case of sequence >= 4096): one sequence of 4,096 tokens
    # through Llama 3's RoPE scaling (factor 8 from an original 512 positions, so most of the
    # sequence lies beyond the unscaled range and the frequencies the scaling changes matter),
    # GQA 2/1 at head_dim 64 (the flash kernels' smallest tile shape; q is 128 wide on a hidden
    # size of 64), a vocabulary small enough that the logits stay 1 MB and every file under 2 MB.
    config = LlamaConfig(
        vocab_size=64, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, head_dim=64, hidden_act="silu",
        max_position_embeddings=8192, rms_norm_eps=1e-5, rope_theta=500000.0,
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                      "high_freq_factor": 4.0, "original_max_position_embeddings": 512},
        tie_word_embeddings=False, attention_bias=False, initializer_range=INIT_STD,
        bos_token_id=None, eos_token_id=None, pad_token_id=None)
    return {"model_class": LlamaForCausalLM, "config": config, "B": 1, "T": 4096,
            "adamw": ADAMW_QWEN2,
            "case_notes": "Llama with one sequence of T = 4096: causal attention over 4,096 keys, "
                          "RoPE at positions up to 4095 with rope_theta 500000 and llama3 scaling "
                          "(factor 8, low/high frequency factors 1/4, original 512 positions: "
                          "wavelengths above 512 are divided by 8, those below 128 kept, the ones "
                          "between blended), GQA 2 query / 1 key-value heads of 64 on a hidden size "
                          "of 64, untied."}


CASES = {
    "llama-long": llama_long_case,
    "qwen3-tiny": qwen3_case,
    "gemma3-tiny": gemma3_case,
    "phi3-tiny": phi3_case,
    "phi3-longrope": phi3_longrope_case,
}


def make_batches(gen, vocab, B, T, count, avoid):
    """`count` batches of random ids in [low, vocab) with shifted labels; row 0's first 8 targets
    are -100 (a prompt) and so is about 1 in 10 of the others."""
    low = 1 if avoid is not None else 0
    assert avoid in (None, 0)
    batches = []
    for _ in range(count):
        seq = torch.randint(low, vocab, (B, T + 1), generator=gen)
        ids = seq[:, :T].clone()
        labels = seq[:, 1:].clone()
        labels[0, :8] = -100
        labels[torch.rand(B, T, generator=gen) < 0.1] = -100
        batches.append((ids.to(torch.int32), labels.to(torch.int32)))
    return batches


def perturb_norms(model, gen):
    """transformers initialises RMSNorm weights to 1 (Gemma: 0, used as 1 + w); draw them instead."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim == 1 and "norm" in name:
                p.add_(0.2 * torch.randn(p.shape, generator=gen, dtype=p.dtype))


def loss_of(model, ids, labels):
    logits = model(input_ids=ids.long()).logits
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.long().reshape(-1),
                           ignore_index=-100)
    return loss, logits


def global_norm(params):
    return torch.sqrt(sum((p.grad.double() ** 2).sum() for p in params)).item()


def check_sliding_mask(model, case):
    """Print and check the eager float64 mask of each layer type (the window must really apply)."""
    config = model.config
    if not getattr(config, "sliding_window", None) or "gemma3" not in config.model_type:
        return
    T = case["T"]
    ids = torch.ones(1, T, dtype=torch.long)
    seen = {}

    def hook(module, args, kwargs):
        mask = kwargs.get("attention_mask")
        seen.setdefault(module.layer_type, mask.detach().clone())

    handles = [layer.self_attn.register_forward_pre_hook(hook, with_kwargs=True)
               for layer in model.model.layers]
    with torch.no_grad():
        model(input_ids=ids)
    for h in handles:
        h.remove()
    w = config.sliding_window
    for layer_type, mask in sorted(seen.items()):
        allowed = (mask[0, 0] == 0)
        print(f"  {layer_type} mask ({mask.dtype}), rows 0..11, cols 0..11 (1 = attends):")
        for row in allowed[:12, :12].int().tolist():
            print("   ", "".join(str(x) for x in row))
        q = torch.arange(T)[:, None]
        k = torch.arange(T)[None, :]
        expect = k <= q
        if layer_type == "sliding_attention":
            expect &= k > q - w
        assert torch.equal(allowed, expect), f"{layer_type} mask is not the expected one"


def hub_style_config(saved):
    """The saved config.json as the Hub's checkpoints spell it (the keys of transformers 4.x, e.g.
    google/gemma-3-4b-it's text_config, microsoft/Phi-4-mini-instruct, Qwen/Qwen3-0.6B): rope_theta,
    rope_scaling (Phi-3's with "type"), rope_local_base_freq, sliding_window_pattern; no
    rope_parameters or layer_types."""
    d = {k: v for k, v in saved.items()
         if k not in ("transformers_version", "rope_parameters", "layer_types",
                      "_sliding_window_pattern", "use_bidirectional_attention")}
    d["torch_dtype"] = d.pop("dtype")
    rope = saved["rope_parameters"]
    if saved["model_type"] == "gemma3_text":
        full, local = rope["full_attention"], rope["sliding_attention"]
        assert local == {"rope_type": "default", "rope_theta": local["rope_theta"]}
        d["rope_theta"] = full["rope_theta"]
        d["rope_local_base_freq"] = local["rope_theta"]
        scaling = {k: v for k, v in full.items() if k != "rope_theta"}
    else:
        d["rope_theta"] = rope["rope_theta"]
        if rope.get("partial_rotary_factor", 1.0) != 1.0:
            d["partial_rotary_factor"] = rope["partial_rotary_factor"]
        # Phi-3 keeps original_max_position_embeddings at the top level; Llama 3's scaling
        # carries it inside rope_scaling.
        top_level = ("original_max_position_embeddings",) if "original_max_position_embeddings" \
            in saved else ()
        scaling = {k: v for k, v in rope.items()
                   if k not in ("rope_theta", "partial_rotary_factor") + top_level}
        if scaling.get("rope_type") == "longrope":
            scaling = {"type" if k == "rope_type" else k: v for k, v in scaling.items()}
    d["rope_scaling"] = None if scaling.get("rope_type") == "default" else scaling
    return dict(sorted(d.items()))


def write_hub_config(model, model_dir, out, case):
    """Writes <case>/hub-config.json and checks that transformers reads it as the same model:
    identical float64 logits on batch 0 from the same weights."""
    with open(os.path.join(model_dir, "config.json")) as f:
        hub = hub_style_config(json.load(f))
    path = os.path.join(out, "hub-config.json")
    with open(path, "w") as f:
        json.dump(hub, f, indent=2)
        f.write("\n")
    check = os.path.join(out, ".hub-check")
    os.makedirs(check)
    try:
        shutil.copy(path, os.path.join(check, "config.json"))
        os.symlink(os.path.join(model_dir, "model.safetensors"),
                   os.path.join(check, "model.safetensors"))
        other = AutoModelForCausalLM.from_pretrained(check, dtype=torch.float64,
                                                     attn_implementation="eager")
    finally:
        shutil.rmtree(check)
    assert getattr(other.config, "layer_types", None) == getattr(model.config, "layer_types", None)
    # transformers keeps the legacy "type" beside the "rope_type" it derives from it.
    legacy = {k: v for k, v in other.config.rope_parameters.items() if k != "type"}
    assert legacy == model.config.rope_parameters, (legacy, model.config.rope_parameters)
    ids = case["batch0"][0].long()
    with torch.no_grad():
        assert torch.equal(other(input_ids=ids).logits, model(input_ids=ids).logits)


def generate(name, out_root):
    torch.manual_seed(1234)
    gen = torch.Generator().manual_seed(20260127)
    case = CASES[name]()
    config = case["config"]
    B, T, h = case["B"], case["T"], case["adamw"]
    out = os.path.join(out_root, name)
    model_dir = os.path.join(out, "model")
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)

    model = case["model_class"](config).to(torch.float32)
    perturb_norms(model, gen)
    model.save_pretrained(model_dir, safe_serialization=True)
    # The float64 reference starts from exactly the float32 weights of the folder.
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float64,
                                                 attn_implementation="eager")
    assert type(model) is case["model_class"], type(model)
    model.train()
    check_sliding_mask(model, case)

    avoid = getattr(config, "pad_token_id", None)
    batches = make_batches(gen, config.vocab_size, B, T, h["steps"] + 1, avoid)
    case["batch0"] = batches[0]
    write_hub_config(model, model_dir, out, case)
    params = dict(model.named_parameters())
    # Tied embeddings: named_parameters lists the shared tensor once (model.embed_tokens.weight),
    # which is also the name in model.safetensors.

    # forward_backward: one forward/backward of batch 0.
    ids, labels = batches[0]
    loss, logits = loss_of(model, ids, labels)
    loss.backward()
    grad_norm = global_norm(params.values())
    fb = {"input_ids": ids, "labels": labels, "logits": logits.detach().float().contiguous()}
    for n, p in params.items():
        fb["grad." + n] = p.grad.detach().float().contiguous()
    save_file(fb, os.path.join(out, "forward_backward.safetensors"))
    first_loss = loss.item()

    # adamw_trajectory: `steps` steps of AdamW with global-norm clipping.
    decay = [p for p in params.values() if p.ndim >= 2]
    no_decay = [p for p in params.values() if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": h["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=h["lr"], betas=(h["beta1"], h["beta2"]), eps=h["eps"])
    step_losses, step_norms = [], []
    for s in range(h["steps"]):
        opt.zero_grad()
        loss, _ = loss_of(model, *batches[s])
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), h["clip_grad_norm"])
        opt.step()
        step_losses.append(loss.item())
        step_norms.append(norm.item())
    with torch.no_grad():
        loss_after = loss_of(model, *batches[h["steps"]])[0].item()
    traj = {}
    for s, (ids_s, labels_s) in enumerate(batches):
        traj[f"batch{s}.input_ids"] = ids_s
        traj[f"batch{s}.labels"] = labels_s
    for n, p in params.items():
        traj[n] = p.detach().float().contiguous()
    save_file(traj, os.path.join(out, "adamw_trajectory.safetensors"))
    assert abs(step_losses[0] - first_loss) < 1e-12

    meta = {
        "case": name,
        "B": B,
        "T": T,
        "loss": first_loss,
        "grad_norm": grad_norm,
        "adamw": h,
        "step_losses": step_losses,
        "step_grad_norms_before_clip": step_norms,
        "loss_after": loss_after,
        "notes": NOTES,
        "case_notes": case["case_notes"],
        "model": "model (this folder's model/, a Hugging Face folder: config.json, model.safetensors F32)",
        "architecture": config.architectures[0] if config.architectures else type(model).__name__,
        "hub_config": "hub-config.json: the same configuration in the Hub's (transformers 4.x) keys, "
                      "which transformers reads as the same model (identical logits, checked)",
        "generator": "tests/golden/make_golden.py",
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
    }
    with open(os.path.join(out, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
        f.write("\n")
    print(f"{name}: B={B} T={T} loss={first_loss:.6f} grad_norm={grad_norm:.4f} "
          f"steps={['%.5f' % x for x in step_losses]} after={loss_after:.6f}")


def main():
    names = sys.argv[1:] or list(CASES)
    torch.set_num_threads(1)
    for name in names:
        if name not in CASES:
            sys.exit(f"unknown case {name!r}; the cases are {', '.join(CASES)}")
        generate(name, HERE)


if __name__ == "__main__":
    main()

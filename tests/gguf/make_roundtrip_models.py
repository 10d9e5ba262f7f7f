#!/usr/bin/env python3
"""Tiny random models of Qwen3, Gemma 3 and Phi-3 for the GGUF round trip through llama.cpp
(roundtrip.py), with a training job each, run by hand outside CI (needs torch and transformers):

    python3 tests/gguf/make_roundtrip_models.py OUT [NAME...]
    build/app/spillway-worker train OUT/NAME/job.json        # 4 steps on TinyStories, CPU
    build/app/spillway-worker export --checkpoint OUT/NAME/run/checkpoints/step-000004 \
        --out OUT/NAME/gguf-f16 --format gguf --type f16
    python3 tests/gguf/roundtrip.py --worker build/app/spillway-worker --model OUT/NAME/run/export \
        --gguf OUT/NAME/gguf-f16/model.gguf --prompt "Once upon a time, there was a little girl \
        named Lily. She loved to play outside in the park with her friends, and every day she"

Float32, random init (norm weights moved off their init so that Gemma's + 1 shows), with a real
tokenizer of matching vocabulary from SPILLWAY_DATA_DIR (default /work/shared/data): Qwen3's own;
Llama 2's tokenizer.model for Phi-3 (Phi-3's is Llama 2's plus 64 added tokens, not obtainable
here: vocab_size 32064 leaves ids 32000-32063 as [PAD] tokens) and for Gemma 3 (Gemma's own is not
obtainable). Gemma 3: six layers, llama.cpp's pattern of five sliding-window layers (window 16,
shorter than the prompt's 31 tokens) with RoPE base 1e4 and one global layer with base 1e6;
gemma3-linear adds linear RoPE scaling (factor 8) on the global layer; gemma3-layers has layer_types
[sliding, full, sliding] (window 8), not llama.cpp's default pattern. phi4mini: Phi-4-mini's
shape of RoPE (partial rotary 0.75, LongRoPE with original context 4096 of 131072, tied
embeddings); phi4mini-sharp the same with q and k rows x6 so that attention is sharp enough for
the RoPE factors to move the logits.
"""
import json
import os
import shutil
import sys
from pathlib import Path

import torch
import transformers

DATA = Path(os.environ.get("SPILLWAY_DATA_DIR", "/work/shared/data"))
D = DATA / "tokenizers"
M = {
 "qwen3": ("Qwen3Config", dict(vocab_size=151936, hidden_size=64, intermediate_size=128,
    num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
    max_position_embeddings=2048, rope_theta=1e6, tie_word_embeddings=True,
    bos_token_id=151643, eos_token_id=151645, pad_token_id=151643), "qwen3"),
 # 6 layers: 5 sliding (window 16, theta 1e4) + 1 global (theta 1e6), llama.cpp's pattern of 6.
 "gemma3": ("Gemma3TextConfig", dict(vocab_size=32000, hidden_size=64, intermediate_size=128,
    num_hidden_layers=6, num_attention_heads=2, num_key_value_heads=1, head_dim=32,
    max_position_embeddings=2048, sliding_window=16, query_pre_attn_scalar=32,
    rope_theta=1e6, rope_local_base_freq=1e4,
    bos_token_id=1, eos_token_id=2, pad_token_id=0), "llama2"),
 "gemma3-linear": ("Gemma3TextConfig", dict(vocab_size=32000, hidden_size=64, intermediate_size=128,
    num_hidden_layers=6, num_attention_heads=2, num_key_value_heads=1, head_dim=32,
    max_position_embeddings=2048, sliding_window=16, query_pre_attn_scalar=32,
    rope_theta=1e6, rope_local_base_freq=1e4, rope_scaling={"rope_type": "linear", "factor": 8.0},
    bos_token_id=1, eos_token_id=2, pad_token_id=0), "llama2"),
 # Layer types that are not llama.cpp's default pattern (every 6th layer global), as
 # gemma3-tiny's goldens: the file must name them (attention.sliding_window_pattern).
 "gemma3-layers": ("Gemma3TextConfig", dict(vocab_size=32000, hidden_size=64,
    intermediate_size=128, num_hidden_layers=3, num_attention_heads=2, num_key_value_heads=1,
    head_dim=32, max_position_embeddings=2048, sliding_window=8, query_pre_attn_scalar=32,
    layer_types=["sliding_attention", "full_attention", "sliding_attention"],
    rope_theta=1e6, rope_local_base_freq=1e4,
    bos_token_id=1, eos_token_id=2, pad_token_id=0), "llama2"),
 "phi3": ("Phi3Config", dict(vocab_size=32064, hidden_size=64, intermediate_size=128,
    num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
    max_position_embeddings=4096, original_max_position_embeddings=4096, rope_theta=10000.0,
    sliding_window=2047, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2,
    pad_token_id=0), "llama2"),
 # Phi-4-mini style: partial rotary 0.75 (rotary dim 12 of head 16), LongRoPE, tied embeddings.
 "phi4mini": ("Phi3Config", dict(vocab_size=32064, hidden_size=64, intermediate_size=128,
    num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
    max_position_embeddings=131072, original_max_position_embeddings=4096, rope_theta=10000.0,
    partial_rotary_factor=0.75, sliding_window=None, tie_word_embeddings=True,
    rope_scaling={"type": "longrope", "long_factor": [1.0, 1.3, 1.9, 2.6, 3.4, 4.0],
                  "short_factor": [1.0, 1.05, 1.1, 1.2, 1.35, 1.5]},
    bos_token_id=1, eos_token_id=2, pad_token_id=0), "llama2"),
}
M["phi4mini-sharp"] = (M["phi4mini"][0], dict(M["phi4mini"][1]), "llama2")
ARCH = {"Qwen3Config": "Qwen3ForCausalLM", "Gemma3TextConfig": "Gemma3ForCausalLM",
        "Phi3Config": "Phi3ForCausalLM"}
OUT = Path(sys.argv[1]).resolve()
for name in sys.argv[2:] or M:
    cls, kw, tok = M[name]
    torch.manual_seed(0)
    cfg = getattr(transformers, cls)(**kw)
    model = getattr(transformers, ARCH[cls])(cfg).float().eval()
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "norm" in n:  # Gemma scales by 1 + w (init 0), the others by w (init 1)
                p.copy_((torch.randn_like(p) * 0.1) + (0 if "gemma" in name else 1))
    if name.endswith("-sharp"):  # q and k rows x6: attention logits x36, so RoPE matters
        with torch.no_grad():
            for layer in model.model.layers:
                w = layer.self_attn.qkv_proj.weight
                head_dim = cfg.hidden_size // cfg.num_attention_heads
                qk = (cfg.num_attention_heads + cfg.num_key_value_heads) * head_dim
                w[:qk] *= 6
    out = OUT / name / "model"
    shutil.rmtree(OUT / name, ignore_errors=True)
    model.save_pretrained(out, safe_serialization=True)
    for f in (D / tok).iterdir():
        shutil.copy(f, out)
    job = {"name": f"gguf-{name}", "model": {"path": str(out)},
           "data": {"train": str(DATA / "datasets/tinystories/tinystories_sample.txt"),
                    "format": "text", "seq_len": 64, "shuffle": False},
           "train": {"steps": 4, "micro_batch_size": 2, "lr": 0.001, "schedule": "constant"},
           "placement": {"backend": "cpu"},
           "output": {"run_dir": str(OUT / name / "run"), "db": str(OUT / name / "history.db")}}
    (OUT / name / "job.json").write_text(json.dumps(job, indent=2) + "\n")
    print(OUT / name / "job.json")

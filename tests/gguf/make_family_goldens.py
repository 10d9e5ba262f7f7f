#!/usr/bin/env python3
"""Writes tests/gguf/golden/<family>.json: what llama.cpp's convert_hf_to_gguf.py makes of a tiny
random model of each family GGUF export maps (Qwen3, Gemma 3, Phi-3; Llama and Qwen2 are checked
byte for byte by compare_with_convert.py on real exports). Each golden holds the config.json,
the tokenizer folder used (under SPILLWAY_DATA_DIR), every metadata key but the token arrays (whose
lengths and SHA-256 it keeps), and per tensor the Hugging Face name, convert's GGUF name, type and
shape, and the transformation convert applied to its values (none, add_one, permute), found by
comparing the values. model-test's GgufGoldenTest reads them. Run by hand (needs torch,
transformers, and llama.cpp's source: LLAMA_CPP=.../vendor/llama.cpp):

    LLAMA_CPP=/path/to/llama.cpp python3 tests/gguf/make_family_goldens.py /work/shared/data
"""
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
import transformers

ROOT = Path(__file__).resolve().parents[2]
LLAMA_CPP = Path(os.environ["LLAMA_CPP"])
sys.path.insert(0, str(LLAMA_CPP / "gguf-py"))
import gguf  # noqa: E402  (llama.cpp's own, matching its convert script)

FAMILIES = {
    # family: (config class, config, tokenizer folder under the data dir)
    "qwen3": ("Qwen3Config", dict(vocab_size=151936, hidden_size=32, intermediate_size=64,
                                  num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                  head_dim=16, max_position_embeddings=512, rope_theta=1e6,
                                  tie_word_embeddings=True, bos_token_id=151643,
                                  eos_token_id=151645), "tokenizers/qwen3"),
    "gemma3": ("Gemma3TextConfig", dict(vocab_size=32000, hidden_size=32, intermediate_size=64,
                                        num_hidden_layers=3, num_attention_heads=2,
                                        num_key_value_heads=1, head_dim=32,
                                        max_position_embeddings=1024, sliding_window=64,
                                        query_pre_attn_scalar=32, bos_token_id=1, eos_token_id=2,
                                        pad_token_id=0), "tokenizers/llama2"),
    "phi3": ("Phi3Config", dict(vocab_size=32064, hidden_size=32, intermediate_size=64,
                                num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
                                max_position_embeddings=4096, original_max_position_embeddings=4096,
                                rope_theta=10000.0, sliding_window=2047, tie_word_embeddings=False,
                                bos_token_id=1, eos_token_id=32000, pad_token_id=32000),
             "tokenizers/llama2"),
    # Phi-3 128k's LongRoPE: rope_factors_long/short and rope.scaling.attn_factor.
    "phi3-longrope": ("Phi3Config", dict(vocab_size=32064, hidden_size=32, intermediate_size=64,
                                         num_hidden_layers=2, num_attention_heads=4,
                                         num_key_value_heads=4, max_position_embeddings=131072,
                                         original_max_position_embeddings=4096,
                                         rope_theta=10000.0, sliding_window=None,
                                         rope_scaling={"type": "longrope",
                                                       "long_factor": [1.0, 1.5, 2.25, 3.5],
                                                       "short_factor": [1.0, 1.0, 1.125, 1.25]},
                                         bos_token_id=1, eos_token_id=32000, pad_token_id=32000),
                      "tokenizers/llama2"),
    # Gemma 3 4B and up: linear RoPE scaling (factor 8) on the global layers.
    "gemma3-linear": ("Gemma3TextConfig", dict(vocab_size=32000, hidden_size=32,
                                               intermediate_size=64, num_hidden_layers=2,
                                               num_attention_heads=2, num_key_value_heads=1,
                                               head_dim=32, max_position_embeddings=131072,
                                               sliding_window=64, query_pre_attn_scalar=32,
                                               rope_parameters={
                                                   "full_attention": {"rope_type": "linear",
                                                                      "factor": 8.0,
                                                                      "rope_theta": 1e6},
                                                   "sliding_attention": {"rope_type": "default",
                                                                         "rope_theta": 1e4}},
                                               bos_token_id=1, eos_token_id=2, pad_token_id=0),
                      "tokenizers/llama2"),
}
ARCH = {"Qwen3Config": "Qwen3ForCausalLM", "Gemma3TextConfig": "Gemma3ForCausalLM",
        "Phi3Config": "Phi3ForCausalLM"}


def value(v):
    if isinstance(v, (np.floating, float)):
        return float(v)
    if isinstance(v, (np.integer, int, bool)):
        return v
    return v


def main():
    data = Path(sys.argv[1])
    for family, (cls, kwargs, tok) in FAMILIES.items():
        torch.manual_seed(0)
        config = getattr(transformers, cls)(**kwargs)
        model = getattr(transformers, ARCH[cls])(config).eval()
        with torch.no_grad():  # norms away from their init so that + 1 is visible
            for n, p in model.named_parameters():
                if "norm" in n:
                    p.copy_(torch.randn_like(p) * 0.1)
        with tempfile.TemporaryDirectory() as tmp:
            model.save_pretrained(tmp)
            for f in (data / tok).iterdir():
                shutil.copy(f, tmp)
            out = Path(tmp) / "out.gguf"
            subprocess.run([sys.executable, str(LLAMA_CPP / "convert_hf_to_gguf.py"), tmp,
                            "--outtype", "f16", "--outfile", str(out)], check=True,
                           capture_output=True, env=dict(os.environ,
                                                         PYTHONPATH=str(LLAMA_CPP / "gguf-py")))
            config_json = json.loads((Path(tmp) / "config.json").read_text())
            r = gguf.GGUFReader(str(out))
            kv = {}
            for name, f in r.fields.items():
                if name.startswith("GGUF.") or name in ("general.name", "general.basename",
                                                        "general.size_label", "general.finetune"):
                    continue
                c = f.contents()
                if isinstance(c, list) and len(c) > 16:
                    kv[name] = {"length": len(c), "sha256": hashlib.sha256(
                        json.dumps([value(x) for x in c], ensure_ascii=False).encode()).hexdigest()}
                else:
                    kv[name] = value(c) if not isinstance(c, list) else [value(x) for x in c]
            hf = dict(model.state_dict())
            if config.tie_word_embeddings:
                hf.pop("lm_head.weight", None)
            map_ = gguf.get_tensor_name_map(gguf.MODEL_ARCH[
                {"qwen3": "QWEN3", "gemma3": "GEMMA3", "phi3": "PHI3"}[family.split("-")[0]]],
                config.num_hidden_layers)
            tensors = []
            by_name = {t.name: t for t in r.tensors}
            for name, t in hf.items():
                gname = map_.get_name(name, try_suffixes=(".weight", ".bias"))
                g = by_name[gname]
                vals = np.asarray(g.data, dtype=np.float32).reshape(t.shape)
                x = t.float().numpy()
                tol = 2e-3 * max(1.0, float(np.abs(x).max()) + 1)
                if np.allclose(vals, x, atol=tol):
                    transform = "none"
                elif np.allclose(vals, x + 1, atol=tol):
                    transform = "add_one"
                else:
                    transform = "other"
                tensors.append({"hf": name, "gguf": gname, "type": g.tensor_type.name,
                                "ne": [int(n) for n in g.shape], "transform": transform})
            extra = {n: [float(x) for x in np.asarray(t.data, dtype=np.float32)]
                     for n, t in by_name.items()
                     if n not in {e["gguf"] for e in tensors}}
            golden = {"family": family, "extra_tensors": extra, "converter": "llama.cpp convert_hf_to_gguf.py (llama-cpp-python "
                      "0.3.36's vendor/llama.cpp), --outtype f16", "tokenizer": tok,
                      "config": config_json, "metadata": kv, "tensors": tensors}
            path = ROOT / "tests/gguf/golden" / f"{family}.json"
            path.write_text(json.dumps(golden, indent=1, ensure_ascii=False) + "\n")
            print(path, len(tensors), "tensors", len(kv), "keys")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Compares Spillway's model.gguf with what llama.cpp's convert_hf_to_gguf.py writes for the same
checkpoint (from Spillway's Hugging Face export): every metadata key and value, every tensor's
name, type, shape and bytes. Run by hand, outside CI (CI has no llama.cpp):

    python3 tests/gguf/compare_with_convert.py OURS.gguf CONVERTS.gguf

Keys convert derives from the model card or folder name (general.name, basename, size_label,
finetune, ...) are not compared; neither is general.name. Exit 0 when everything else is equal.
Needs gguf (llama.cpp's gguf-py: pip install gguf, or its source on PYTHONPATH) and numpy.
"""
import sys

import gguf
import numpy as np

# general.* keys convert fills from the folder name / model card, not from the model.
DESCRIPTIVE = {"general.name", "general.basename", "general.size_label", "general.finetune",
               "general.version", "general.license", "general.tags", "general.languages",
               "general.base_model.count", "general.quantized_by", "general.sampling.top_k",
               "general.sampling.top_p", "general.sampling.temp"}


def fields(reader):
    out = {}
    for name, f in reader.fields.items():
        if name.startswith("GGUF.") or name in DESCRIPTIVE or name.startswith("general.base_model."):
            continue
        out[name] = (f.types, f.contents())
    return out


def main():
    ours, theirs = gguf.GGUFReader(sys.argv[1]), gguf.GGUFReader(sys.argv[2])
    problems = []
    a, b = fields(ours), fields(theirs)
    for k in sorted(set(a) | set(b)):
        if k not in a:
            problems.append(f"key {k} only in convert's: {str(b[k][1])[:80]}")
        elif k not in b:
            problems.append(f"key {k} only in Spillway's: {str(a[k][1])[:80]}")
        elif a[k][0] != b[k][0]:
            problems.append(f"key {k}: types {a[k][0]} vs {b[k][0]}")
        elif a[k][1] != b[k][1]:
            va, vb = a[k][1], b[k][1]
            if isinstance(va, list) and isinstance(vb, list) and len(va) == len(vb):
                i = next(i for i in range(len(va)) if va[i] != vb[i])
                problems.append(f"key {k}: first difference at [{i}]: {va[i]!r} vs {vb[i]!r}")
            else:
                problems.append(f"key {k}: {str(va)[:80]} vs {str(vb)[:80]}")
    ta = {t.name: t for t in ours.tensors}
    tb = {t.name: t for t in theirs.tensors}
    for n in sorted(set(ta) | set(tb)):
        if n not in ta or n not in tb:
            problems.append(f"tensor {n} only in {'convert' if n not in ta else 'Spillway'}'s")
            continue
        x, y = ta[n], tb[n]
        if x.tensor_type != y.tensor_type or list(x.shape) != list(y.shape):
            problems.append(f"tensor {n}: {x.tensor_type.name}{list(x.shape)} vs "
                            f"{y.tensor_type.name}{list(y.shape)}")
            continue
        xa, ya = np.asarray(x.data).view(np.uint8), np.asarray(y.data).view(np.uint8)
        if not np.array_equal(xa, ya):
            diff = int(np.count_nonzero(xa != ya))
            problems.append(f"tensor {n} ({x.tensor_type.name}): {diff} of {xa.size} bytes differ")
    print(f"{sys.argv[1]} vs {sys.argv[2]}: {len(a)} keys, {len(ta)} tensors compared")
    for p in problems:
        print("  DIFF", p)
    print("  equal" if not problems else f"  {len(problems)} differences")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

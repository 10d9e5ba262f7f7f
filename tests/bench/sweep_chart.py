#!/usr/bin/env python3
"""Tokens/s against tokens per step, as an SVG chart, from `spillway-worker bench --json` lines.

Usage: python3 tests/bench/sweep_chart.py SWEEP.jsonl [SWEEP.jsonl ...] OUT.svg
One series per sequence length (the bench lines' seq_len); the peers' points measured on the same
H100 machine are drawn beside them (../shared/bench/README.md and this project's README). Standard
library only, so it runs anywhere the bench output is.
"""
import json
import math
import sys

# (label, tokens per step, tokens/s, colour): the peers on the same machine, llama2-7b, seq 2048.
PEERS = [
    ("MegaTrain (bf16 state)", 64 * 2048, 5425, "#d62728"),
    ("FSDP2 CPU offload", 8 * 2048, 1233, "#7f7f7f"),
    ("FSDP2 CPU offload, 4 micro-batches", 32 * 2048, 677, "#7f7f7f"),
]
SERIES_COLOURS = {2048: "#1f77b4", 4096: "#2ca02c", 8192: "#9467bd"}

W, H = 720, 420
LEFT, RIGHT, TOP, BOTTOM = 70, 200, 40, 60
X_MIN, X_MAX = 14, 18  # log2 of tokens per step: 16K .. 256K
Y_MAX = 12000


def x_of(tokens):
    return LEFT + (math.log2(tokens) - X_MIN) / (X_MAX - X_MIN) * (W - LEFT - RIGHT)


def y_of(tps):
    return H - BOTTOM - tps / Y_MAX * (H - TOP - BOTTOM)


def main(sources, out):
    series = {}
    lines = [line for src in sources for line in open(src)]
    for line in lines:
        line = line.strip()
        if not line.startswith("{"):
            continue
        r = json.loads(line)
        if "tokens_per_s" not in r:
            continue  # an error line (a configuration that did not fit or was cut off)
        series.setdefault(r["seq_len"], []).append((r["tokens_per_step"], r["tokens_per_s"], r["model_tflops"]))
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{LEFT}" y="22" font-size="14" font-weight="bold">llama2-7b on one H100 80 GB: tokens/s against tokens per step</text>']
    for k in range(X_MIN, X_MAX + 1):  # x grid: 16K, 32K, ...
        x = x_of(2 ** k)
        svg.append(f'<line x1="{x:.1f}" y1="{TOP}" x2="{x:.1f}" y2="{H - BOTTOM}" stroke="#ddd"/>')
        svg.append(f'<text x="{x:.1f}" y="{H - BOTTOM + 16}" text-anchor="middle">{2 ** k // 1024}K</text>')
    for tps in range(0, Y_MAX + 1, 2000):
        y = y_of(tps)
        svg.append(f'<line x1="{LEFT}" y1="{y:.1f}" x2="{W - RIGHT}" y2="{y:.1f}" stroke="#ddd"/>')
        svg.append(f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{tps:,}</text>')
    svg.append(f'<text x="{(LEFT + W - RIGHT) / 2}" y="{H - 18}" text-anchor="middle">tokens per step (log scale)</text>')
    svg.append(f'<text x="18" y="{(TOP + H - BOTTOM) / 2}" text-anchor="middle" '
               f'transform="rotate(-90 18 {(TOP + H - BOTTOM) / 2})">tokens/s</text>')
    legend_y = TOP + 10
    for seq in sorted(series):
        pts = sorted(series[seq])
        colour = SERIES_COLOURS.get(seq, "#000")
        path = " ".join(f"{x_of(t):.1f},{y_of(s):.1f}" for t, s, _ in pts)
        svg.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"/>')
        for t, s, tf in pts:
            svg.append(f'<circle cx="{x_of(t):.1f}" cy="{y_of(s):.1f}" r="4" fill="{colour}">'
                       f'<title>{t} tokens/step: {s:,.0f} tokens/s, {tf:.0f} model TFLOPS</title></circle>')
        svg.append(f'<circle cx="{W - RIGHT + 16}" cy="{legend_y - 4}" r="4" fill="{colour}"/>')
        svg.append(f'<text x="{W - RIGHT + 26}" y="{legend_y}">Spillway, seq {seq}</text>')
        legend_y += 18
    seen = set()
    for label, t, s, colour in PEERS:
        x, y = x_of(t), y_of(s)
        svg.append(f'<rect x="{x - 4:.1f}" y="{y - 4:.1f}" width="8" height="8" fill="{colour}"><title>{label}: {s:,} tokens/s</title></rect>')
        name = label.split(",")[0]
        if name in seen:
            continue
        seen.add(name)
        svg.append(f'<rect x="{W - RIGHT + 12}" y="{legend_y - 8}" width="8" height="8" fill="{colour}"/>')
        svg.append(f'<text x="{W - RIGHT + 26}" y="{legend_y}">{name}</text>')
        legend_y += 18
    svg.append(f'<text x="{W - RIGHT + 12}" y="{legend_y + 10}" font-size="11" fill="#555">fp32 master + AdamW</text>')
    svg.append(f'<text x="{W - RIGHT + 12}" y="{legend_y + 24}" font-size="11" fill="#555">in DRAM (Spillway);</text>')
    svg.append(f'<text x="{W - RIGHT + 12}" y="{legend_y + 38}" font-size="11" fill="#555">MegaTrain keeps bf16</text>')
    svg.append("</svg>")
    with open(out, "w") as f:
        f.write("\n".join(svg) + "\n")


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    main(sys.argv[1:-1], sys.argv[-1])

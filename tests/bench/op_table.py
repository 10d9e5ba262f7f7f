#!/usr/bin/env python3
"""The per-op table of a training step against the ceilings, in one call (README, "Per op").

Runs the peers' ceilings (../shared/bench/op_ceilings.py: cuBLAS through PyTorch at the 7B layer
shapes, the flash and cuDNN fused attention) and then `spillway-worker bench ARGS --ops --json`
one after the other, so that both are measured on the same GPU in the same call, and prints one
markdown table per bench line: each op family's calls and device time in one step, its FLOPs or
bytes, the rate it reached, the ceiling the worker measured in its own process (a 1 GiB device copy
for the memory-bound ops, the 8192^3 GEMM for the rest) with the fraction of it, and where the
peers have the same shape their ceiling with the fraction of that:

  - GEMMs: cuBLAS's time for the layer's GEMMs (q/k/v fused, o, gate+up fused, down) at the
    micro-batch's tokens, weighted by each one's FLOPs; forward for gemm_forward, input plus weight
    gradient (bf16 out) for gemm_backward, all three for lm_head_loss;
  - attention: cuDNN's fused attention at the same sequence and head size (op_ceilings.py times
    32 heads at batch 4 and 8 of 2048, 2 of 4096); the backward's rate from its forward and
    forward + backward figures, in the worker's count (backward = 2 x forward FLOPs, as the
    planner's step_flops), so that both sides divide the same FLOPs.

usage: python3 tests/bench/op_table.py OP_CEILINGS_PY WORKER BENCH_ARGS...
  e.g. python3 tests/bench/op_table.py ../shared/bench/op_ceilings.py build/app/spillway-worker \\
           --model llama2-7b --backend cuda --micro-batch 4 --seq-len 2048 --micro-batches 4
--raw FILE (first) also writes both programs' JSON lines to FILE.
"""
import json
import subprocess
import sys

# op_ceilings.py's GEMMs: name -> (k, n) of y[tokens, n] = x[tokens, k] . W[n, k]^T.
PEER_GEMMS = {'qkv': (4096, 12288), 'o': (4096, 4096), 'gate_up': (4096, 22016),
              'down': (11008, 4096)}
PEER_LAYER_SHAPES = {(4096, 4096), (4096, 11008), (11008, 4096)}  # (in, out) of the 7B layer's


def shape_dims(text):
    """'[8192, 4096, 4096]' -> [8192, 4096, 4096]"""
    return [int(x) for x in text.strip('[]').split(',') if x.strip()]


def peer_rate(row, peers):
    """The peers' TFLOPS for the row's work at its shapes, or None when they have no such shape."""
    op = row['op']
    shapes = [shape_dims(s) for s in row.get('shapes', [])]
    if not shapes:
        return None
    tokens = {s[0] for s in shapes}  # the GEMMs' rows: a micro-batch's tokens
    gemms = {p['op'][len('gemm_'):]: p for p in peers
             if p.get('op', '').startswith('gemm_') and p.get('tokens') in tokens}
    if op in ('gemm_forward', 'gemm_backward'):
        if len(tokens) != 1 or {(s[1], s[2]) for s in shapes} - PEER_LAYER_SHAPES:
            return None
        layer = {k: v for k, v in gemms.items() if k in PEER_GEMMS}
        if len(layer) != len(PEER_GEMMS):
            return None
        keys = ['fwd_tflops'] if op == 'gemm_forward' else ['dgrad_tflops', 'wgrad_tflops']
        flops = seconds = 0.0
        for name, (k, n) in PEER_GEMMS.items():
            for key in keys:
                flops += k * n
                seconds += k * n / layer[name][key]
        return flops / seconds
    if op == 'lm_head_loss':
        tokens, hidden, vocab = shapes[0]
        head = gemms.get('lm_head')
        if head is None or (hidden, vocab) != (4096, 32000):
            return None
        keys = ('fwd_tflops', 'dgrad_tflops', 'wgrad_tflops')
        return len(keys) / sum(1.0 / head[key] for key in keys)
    if op in ('attention_forward', 'attention_backward'):
        b, t, heads, d = shapes[0]
        cudnn = [p for p in peers if p.get('op') == 'attention' and 'error' not in p
                 and p.get('backend') == 'CUDNN_ATTENTION' and p['S'] == t and p['D'] == d]
        if not cudnn:
            return None
        p = min(cudnn, key=lambda p: abs(p['B'] - b))
        fwd, fwd_bwd = p['fwd_tflops'], p['fwd_bwd_tflops']
        if op == 'attention_forward':
            return fwd
        # op_ceilings.py counts forward + backward as 3.5 forwards: the backward takes
        # 3.5/fwd_bwd - 1/fwd seconds per forward FLOP, for 2 forwards' worth of FLOPs here.
        return 2.0 / (3.5 / fwd_bwd - 1.0 / fwd)
    return None


def fmt(v, digits=3):
    return '-' if v is None else f'{v:.{digits}g}'


def table(bench, peers):
    """The markdown table of one bench JSON line, with the peers' ceilings where they apply."""
    if 'error' in bench:
        return f"{bench.get('model')}: {bench['error']}: {bench.get('message', '')}\n"
    c = bench['op_ceilings']
    lines = [
        f"{bench['model']} on {bench['device']}, {bench['micro_batches']} x {bench['micro_batch']}"
        f" x {bench['seq_len']} tokens a step: {bench['tokens_per_s']:,.0f} tokens/s, "
        f"{bench['model_tflops']:.3g} model TFLOPS, step {bench['step_s']:.3f} s. Ceilings in the "
        f"worker's process: copy_d2d of {c['copy_bytes'] >> 20} MiB {c['copy_gb_s']:,.0f} GB/s, "
        f"GEMM {c['gemm_n']}^3 {c['gemm_tflops']:.3g} TFLOPS.",
        '',
        '| op | shapes | calls | time (s) | FLOPs or bytes | rate | ceiling | of it | peers\' ceiling'
        ' | of it |',
        '|---|---|---|---|---|---|---|---|---|---|',
    ]
    for row in bench['ops']:
        flops = 'flops' in row
        work = f"{row['flops']:.3g} FLOP" if flops else f"{row['bytes']:.3g} B"
        peer = peer_rate(row, peers) if flops else None
        shapes = ', '.join(row['shapes'][:4]) + (' ...' if len(row['shapes']) > 4 else '')
        name = row['op'] + (' (overlapped)' if row['overlapped'] else '')
        lines.append(
            f"| {name} | {shapes} | {row['calls']} | {row['s']:.4f} | {work} | "
            f"{row['rate']:,.4g} {row['unit']} | {row['ceiling']:,.4g} | {row['fraction']:.2f} | "
            f"{fmt(peer, 4)} | {fmt(None if peer is None else row['rate'] / peer, 2)} |")
    s = bench['ops_sum']
    lines.append(f"| sum (compute stream) | | | {s['s']:.4f} | | | | | | |")
    lines.append('')
    lines.append(f"The profiled step took {s['profiled_step_s']:.4f} s (the timed steps' median "
                 f"{s['step_s']:.4f} s): {s['other_s']:.4f} s of it outside the ops.")
    return '\n'.join(lines) + '\n'


def main(argv):
    raw = None
    if len(argv) > 2 and argv[1] == '--raw':
        raw, argv = argv[2], argv[:1] + argv[3:]
    if len(argv) < 3:
        sys.exit(__doc__)
    ceilings_py, worker, args = argv[1], argv[2], argv[3:]
    ceilings = subprocess.run([sys.executable, ceilings_py], check=True, capture_output=True,
                              text=True).stdout
    peers = [json.loads(line) for line in ceilings.splitlines() if line.startswith('{')]
    bench = subprocess.run([worker, 'bench', *args, '--ops', '--json'], capture_output=True,
                           text=True)
    lines = [json.loads(line) for line in bench.stdout.splitlines() if line.startswith('{')]
    if raw:
        with open(raw, 'w') as f:
            f.write(ceilings + bench.stdout)
    if not lines:
        sys.exit(f'op_table: the worker printed no result (exit {bench.returncode}): '
                 f'{bench.stderr.strip()}')
    for line in lines:
        print(table(line, peers))
    return bench.returncode


if __name__ == '__main__':
    sys.exit(main(sys.argv))

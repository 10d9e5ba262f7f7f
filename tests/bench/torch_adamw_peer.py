"""CPU AdamW peer for `bench-train --adamw-only`: torch.optim.AdamW(fused=True) on one fp32 tensor of N
parameters, all cores, timed the same way (median of 5 steps after 2 warm-up ones), same
hyper-parameters, same 28 bytes per parameter (reads p, g, m, v; writes p, m, v). Run both in one
call on the same machine for the ratio:

  build/tests/bench/bench-train --adamw-only --params 1e9
  python3 tests/bench/torch_adamw_peer.py 1e9

usage: python3 torch_adamw_peer.py [params]   (default 1e9: 16 GB of state)
"""
import json, os, statistics, sys, time
import torch

n = int(float(sys.argv[1])) if len(sys.argv) > 1 else 1_000_000_000
threads = os.cpu_count()
torch.set_num_threads(threads)
# The values of bench-train's AdamW: p 0.02, g in {-3..3}·1e-3 (a cycle of 7), m = v = 0.
p = torch.nn.Parameter(torch.full((n,), 0.02, dtype=torch.float32))
p.grad = torch.arange(-3, 4, dtype=torch.float32).mul_(1e-3).repeat((n + 6) // 7)[:n]
opt = torch.optim.AdamW([p], lr=1e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1, fused=True)
times = []
for i in range(7):
    t0 = time.perf_counter()
    opt.step()
    if i >= 2:  # the first step also allocates and zeroes exp_avg and exp_avg_sq
        times.append(time.perf_counter() - t0)
step_s = statistics.median(times)
print(json.dumps({"peer": "torch_adamw_fused", "params": n, "threads": threads, "step_s": step_s,
                  "params_per_s": n / step_s, "gbps": 28.0 * n / step_s / 1e9}), flush=True)

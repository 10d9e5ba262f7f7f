#!/usr/bin/env bash
# A CPU-backend training run with the AdamW state in DRAM against the same run with it on the SSD
# tier (and with the master weights there too): mean step time and the SSD traffic from the step
# events. usage: tests/bench/ssd-placement-bench.sh [BUILD_DIR] [SSD_DIR] [PRESET] [STEPS]
set -euo pipefail
build=${1:-build}
ssd=${2:-$PWD/ssd-bench-tmp}
preset=${3:-llama-50m}
steps=${4:-8}
work=$(mktemp -d)
trap 'rm -rf "$work" "$ssd"' EXIT
mkdir -p "$ssd"
head -c 2000000 /usr/share/games/fortunes/songs-poems > "$work/text.txt" 2>/dev/null || yes "the quick brown fox jumps over the lazy dog" | head -c 2000000 > "$work/text.txt"
for placement in dram ssd ssd+master; do
  case $placement in
    dram) p='{"backend": "cpu"}' ;;
    ssd) p='{"backend": "cpu", "optimizer": "ssd", "ssd_dir": "'"$ssd"'"}' ;;
    ssd+master) p='{"backend": "cpu", "optimizer": "ssd", "master": "ssd", "ssd_dir": "'"$ssd"'"}' ;;
  esac
  cat > "$work/job.json" <<JOB
{"name": "ssd bench $placement", "model": {"init": "$preset", "tokenizer": "builtin:bytes"},
 "data": {"train": "$work/text.txt", "seq_len": 128},
 "train": {"steps": $steps, "micro_batch_size": 4, "lr": 1e-4, "log_every": 0},
 "placement": $p, "output": {"run_dir": "$work/run-$placement", "db": "$work/runs.db"}}
JOB
  "$build/app/spillway-worker" train "$work/job.json" > /dev/null
  python3 - "$work/run-$placement/events.jsonl" "$placement" <<'PY'
import json, sys
steps = [json.loads(l) for l in open(sys.argv[1]) if '"type":"step"' in l]
s = steps[2:]  # skip warm-up; each step event carries the SSD bytes of the previous step's update
t = sum(e["step_s"] for e in s) / len(s)
r = sum(e.get("ssd_read_bytes", 0) for e in s) / len(s)
w = sum(e.get("ssd_write_bytes", 0) for e in s) / len(s)
print(f"{sys.argv[2]:>11}: {t:.3f} s/step, SSD {r/1e6:.0f} MB read + {w/1e6:.0f} MB written per step = {(r+w)/t/1e9:.2f} GB/s")
PY
done

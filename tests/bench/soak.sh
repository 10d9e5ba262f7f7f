#!/usr/bin/env bash
# A long CPU run that must not leak (issue 28 point 5): stories260K on tiny Shakespeare for STEPS
# steps with an evaluation and a checkpoint every 500 steps and the keep-3 rotation; every
# INTERVAL seconds it samples the worker's resident memory (VmRSS), open files (/proc/PID/fd),
# threads, the run folder's checkpoints and runs.db's size, one CSV line each, and prints a summary
# (first and last samples after warm-up, min and max). The run is the worker as a user starts it.
# usage: tests/bench/soak.sh [BUILD_DIR] [DATA_DIR] [STEPS] [INTERVAL_S] [OUT_DIR]
set -euo pipefail
build=${1:-build}
data=${2:-../shared/data}
steps=${3:-20000}
interval=${4:-10}
out=${5:-$(mktemp -d)}
mkdir -p "$out"
worker=$(find "$build" -name spillway-worker -type f -perm -u+x | head -1)
cat > "$out/job.json" <<JOB
{"name": "soak", "model": {"path": "$(realpath "$data")/models/stories260K"},
 "data": {"train": "$(realpath "$data")/datasets/tinyshakespeare/input.txt", "seq_len": 64,
          "eval_fraction": 0.02},
 "train": {"steps": $steps, "micro_batch_size": 4, "lr": 1e-3, "log_every": 1,
           "eval_every": 500, "checkpoint_every": 500, "keep_checkpoints": 3},
 "placement": {"backend": "cpu"}, "output": {"run_dir": "$out/run", "db": "$out/runs.db"}}
JOB
XDG_DATA_HOME="$out/xdg" OPENBLAS_NUM_THREADS=1 "$worker" train "$out/job.json" > "$out/worker.out" 2> "$out/worker.err" &
pid=$!
start=$(date +%s)
echo "t_s,step,rss_kib,open_files,threads,checkpoints,runs_db_bytes,events_bytes" > "$out/soak.csv"
while kill -0 "$pid" 2> /dev/null; do
  rss=$(awk '/^VmRSS/ {print $2}' "/proc/$pid/status" 2> /dev/null || echo)
  threads=$(awk '/^Threads/ {print $2}' "/proc/$pid/status" 2> /dev/null || echo)
  fds=$(find "/proc/$pid/fd" -mindepth 1 -maxdepth 1 2> /dev/null | wc -l || true)
  step=$(tail -c 65536 "$out/run/events.jsonl" 2> /dev/null | grep '"type":"step"' | tail -1 | grep -o '"step":[0-9]*' | grep -o '[0-9]*$' || echo 0)
  ckpts=$(find "$out/run/checkpoints" -maxdepth 1 -name 'step-*' 2> /dev/null | wc -l || true)
  db=$(( $(stat -c %s "$out/runs.db" 2> /dev/null || echo 0) + $(stat -c %s "$out/runs.db-wal" 2> /dev/null || echo 0) ))
  ev=$(stat -c %s "$out/run/events.jsonl" 2> /dev/null || echo 0)
  [ -n "$rss" ] && echo "$(( $(date +%s) - start )),${step:-0},$rss,$fds,$threads,$ckpts,$db,$ev" >> "$out/soak.csv"
  sleep "$interval"
done
wait "$pid" && rc=0 || rc=$?
echo "worker exit $rc after $(( $(date +%s) - start )) s; samples in $out/soak.csv"
python3 - "$out/soak.csv" <<'PY'
import csv, sys
rows = [r for r in csv.DictReader(open(sys.argv[1]))]
rows = [r for r in rows if int(r["step"] or 0) >= 500] or rows  # after the first checkpoint
for k in ["rss_kib", "open_files", "threads", "checkpoints", "runs_db_bytes", "events_bytes"]:
    v = [int(r[k]) for r in rows]
    print(f"{k:14s} first {v[0]:>12,}  last {v[-1]:>12,}  min {min(v):>12,}  max {max(v):>12,}")
s = [int(r["step"]) for r in rows]; d = [int(r["runs_db_bytes"]) for r in rows]
if len(rows) > 2 and s[-1] > s[0]:
    print(f"runs.db grows {(d[-1]-d[0])/(s[-1]-s[0]):.1f} bytes per step (steps {s[0]}..{s[-1]})")
PY
exit $rc

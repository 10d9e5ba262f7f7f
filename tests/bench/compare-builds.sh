#!/bin/bash
# compare-builds.sh WORKER_A WORKER_B BACKEND DATA_DIR OUT: whether two builds of spillway-worker
# train bit for bit alike — for a change that must not change numerics (a refactor, a new build
# setup). Trains the same 40-step job (stories260K on tiny Shakespeare, 2 micro-batches of 4 x 64,
# cosine schedule, eval and checkpoint every 20 steps) with both, fresh and then resumed from
# step 20, and compares every step's loss and gradient norm, every eval loss (full precision, as
# events.jsonl holds them) and the sha256 of the last checkpoint's weights and AdamW state.
# BACKEND is cpu or cuda; with cuda each worker loads the libspillway-cuda.so beside it. Not run by
# ctest: it needs two builds. Prints one line per comparison: "identical (N lines)" or "DIFFER".
set -u
A=$1; B=$2; BACKEND=$3; DATA=$4; OUT=$5
mkdir -p "$OUT"
job() {
cat > "$1" <<J
{"name": "compare", "model": {"path": "$DATA/models/stories260K"},
 "data": {"train": "$DATA/datasets/tinyshakespeare/input.txt", "eval_fraction": 0.05, "seq_len": 64, "seed": 7},
 "train": {"steps": 40, "micro_batch_size": 4, "grad_accum": 2, "lr": 1e-3, "schedule": "cosine", "warmup_steps": 5,
           "weight_decay": 0.1, "eval_every": 20, "eval_batches": 4, "checkpoint_every": 20, "keep_checkpoints": 3, "log_every": 0},
 "placement": {"backend": "$BACKEND"}, "output": {"run_dir": "$2"}}
J
}
for w in A B; do
  bin=${!w}; d=$OUT/$w; rm -rf "$d"; mkdir -p "$d"
  job "$d/job.json" "$d/run"
  export SPILLWAY_CUDA_BACKEND=$(dirname "$bin")/libspillway-cuda.so
  XDG_DATA_HOME=$d/xdg "$bin" train "$d/job.json" > "$d/train.log" 2>&1 || { echo "$w train failed"; tail "$d/train.log"; }
  job "$d/job2.json" "$d/run2"
  XDG_DATA_HOME=$d/xdg "$bin" train "$d/job2.json" --resume "$d/run/checkpoints/step-000020" > "$d/resume.log" 2>&1 || { echo "$w resume failed"; tail "$d/resume.log"; }
  for r in run run2; do
    python3 - "$d/$r/events.jsonl" > "$d/$r.losses" <<'P'
import json,sys
for line in open(sys.argv[1]):
    e=json.loads(line)
    if e["type"]=="step": print("step", e["step"], repr(e["loss"]), repr(e["grad_norm"]))
    if e["type"]=="eval": print("eval", e["step"], repr(e["loss"]))
P
  done
  (cd "$d/run/checkpoints/step-000040" && sha256sum model.safetensors optimizer*.safetensors 2>/dev/null) > "$d/ckpt.sha"
done
for f in run.losses run2.losses ckpt.sha; do
  if cmp -s "$OUT/A/$f" "$OUT/B/$f"; then echo "$BACKEND $f: identical ($(wc -l < "$OUT/A/$f") lines)"; else echo "$BACKEND $f: DIFFER"; diff "$OUT/A/$f" "$OUT/B/$f" | head -5; fi
done
tail -n 2 "$OUT/A/run.losses" "$OUT/A/run2.losses"

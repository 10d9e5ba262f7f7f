#!/usr/bin/env bash
# Screenshots of each page of the desktop app (History with the newest run's loss curve, Try it on
# the finished run) during a real run (CPU backend, stories260K on tiny Shakespeare), under Xvfb
# on a screen of SIZE pixels (default 1600x1000) at SCALE (default 1; 2 is 200%, where a
# 1920x1080 screen is 960 x 540 logical pixels and the pictures are 1920 pixels wide). The window
# is what a user gets on that screen: its first size, fitted to the screen less a title bar
# (WindowFitOnScreen.* checks it), unless WINDOW=WxH (logical pixels) asks for another. Images go
# to OUT (default /tmp/spillway-screenshots). tests/ui/figures/ keeps those at 1280x720 and
# 1920x1080 (issue 13 and 26: the window fits a 1280 x 720 screen), reduced to 256 colours.
# usage: [PALETTE=dark] [SIZE=1280x720] [SCALE=2] [WINDOW=WxH] tests/ui/screenshots.sh [BUILD_DIR] [OUT]
set -euo pipefail
build=${1:-build}
out=${2:-/tmp/spillway-screenshots}
data=${SPILLWAY_DATA_DIR:-$(cd "$(dirname "$0")/../../.." && pwd)/shared/data}
size=${SIZE:-1600x1000}
if [[ ! $size =~ ^[0-9]+x[0-9]+$ ]]; then
  echo "SIZE=$size is not a screen size; give width x height in pixels, e.g. SIZE=1280x720" >&2
  exit 2
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export XDG_DATA_HOME="$work/xdg" XDG_CONFIG_HOME="$work/config"  # a fresh profile: the first window
export QT_SCALE_FACTOR=${SCALE:-1}
mkdir -p "$out"
cat > "$work/job.json" <<JOB
{"name": "stories260K on Shakespeare (screenshots)",
 "model": {"path": "$data/models/stories260K"},
 "data": {"train": "$data/datasets/tinyshakespeare/input.txt", "eval_fraction": 0.1, "seq_len": 128},
 "train": {"steps": 3000, "micro_batch_size": 8, "lr": 2e-3, "schedule": "cosine", "warmup_steps": 20,
           "eval_every": 100, "eval_batches": 10, "checkpoint_every": 400},
 "placement": {"backend": "cpu", "device_memory_bytes": 16000000},
 "output": {"run_dir": "$work/run"}}
JOB
# A finished run first, so that History and Compare have two runs.
sed 's/"steps": 3000/"steps": 60/; s#"run_dir": "[^"]*"#"run_dir": "'"$work"'/run0"#' "$work/job.json" > "$work/job0.json"
"$build/app/spillway-worker" train "$work/job0.json" > /dev/null
setsid "$build/app/spillway-worker" train "$work/job.json" > "$work/worker.log" 2>&1 &
worker=$!
sleep 4
window=()
[[ -n ${WINDOW:-} ]] && window=(--size "$WINDOW")
xvfb-run -a -s "-screen 0 ${size}x24" "$build/app/spillway" --screenshot "$out" --wait 8 --palette "${PALETTE:-system}" \
  "${window[@]}" \
  --attach "$work/run" --model "$data/models/stories260K" --dataset "$data/datasets/tinyshakespeare/input.txt"
kill -TERM "$worker" 2>/dev/null || true
wait "$worker" 2>/dev/null || true
ls -l "$out"

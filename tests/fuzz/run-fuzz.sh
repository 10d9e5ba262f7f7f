#!/usr/bin/env bash
# run-fuzz.sh TARGET SECONDS WORK_DIR [LIBFUZZER_FLAG ...]
# Runs one libFuzzer target of tests/fuzz for SECONDS: its corpus grows in WORK_DIR/corpus (kept
# between runs, so a longer campaign continues where the last one stopped), the seeds the target
# derives from ../shared/data are written afresh to WORK_DIR/seeds, and a crash, leak, timeout or
# out-of-memory input is left in WORK_DIR (crash-*, leak-*, timeout-*, oom-*) with a non-zero exit.
# The last lines of libFuzzer's output (executions, coverage, corpus) are printed either way.
set -euo pipefail
target=$1 seconds=$2 work=$3
shift 3
mkdir -p "$work/corpus"
rm -rf "$work/seeds" && mkdir -p "$work/seeds"
log="$work/fuzz.log"
status=0
SPILLWAY_FUZZ_SEEDS_OUT="$work/seeds" \
ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}" \
UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}" \
  "$target" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=3072 -max_len=65536 \
  -print_final_stats=1 -artifact_prefix="$work/" "$@" "$work/corpus" "$work/seeds" >"$log" 2>&1 || status=$?
# The seeds' coverage, the last progress line and the totals.
grep -E '^(INFO: seed corpus|#[0-9]+\s+INITED)' "$log" | tail -2 || true
grep -E '^#[0-9]+\s' "$log" | tail -1 || true
grep -E '^(stat::|Done |SUMMARY|==[0-9]+==ERROR|artifact_prefix|Test unit written)' "$log" || true
if [ "$status" -ne 0 ]; then
  echo "--- $target failed (exit $status); the log's end:"
  tail -60 "$log"
fi
exit "$status"

#!/usr/bin/env bash
# campaign.sh BUILD_DIR SECONDS_PER_TARGET [TARGET ...]
# A longer fuzzing campaign than `ctest -L fuzz`: runs each fuzz target of BUILD_DIR (a build with
# SPILLWAY_FUZZ=ON) for SECONDS_PER_TARGET through run-fuzz.sh, in the same work folder ctest uses
# (BUILD_DIR/tests/fuzz/NAME), so the corpus grows from one run to the next and a campaign can be
# split over several runs. Each run appends one line to BUILD_DIR/tests/fuzz/campaign.tsv:
#   utc  target  seconds  executions  exec_per_s  cov  ft  corpus  peak_rss_mb  result
# (seconds: how long it ran, fewer than asked when it stopped at a failure; cov and ft: libFuzzer's
# edge and feature coverage at the end; result: ok, or the artifact it left).
# `campaign.sh BUILD_DIR summary` prints each target's totals over every run in the folder's
# campaign*.tsv files.
# No target named: all of them. A crash does not stop the campaign; the exit status says whether
# any target failed.
set -uo pipefail
build=$(cd "$1" && pwd) seconds=$2
shift 2
here=$(cd "$(dirname "$0")" && pwd)
tsv="$build/tests/fuzz/campaign.tsv"

if [ "$seconds" = summary ]; then
  # Every campaign*.tsv of the folder: campaign.tsv, and the lines of runs made on other machines
  # from a copy of the build and its corpora (campaign-h100.tsv, say), appended by hand.
  shopt -s nullglob
  tsvs=("$build"/tests/fuzz/campaign*.tsv)
  [ ${#tsvs[@]} -gt 0 ] || { echo "no campaign yet: $tsv is missing" >&2; exit 1; }
  cat "${tsvs[@]}" | awk -F'\t' '{ s[$2] += $3; e[$2] += $4; n[$2]++; cov[$2] = $6; ft[$2] = $7; corp[$2] = $8
               if ($10 != "ok") bad[$2]++ }
       END { for (t in s) printf "%-22s %5d %9d %14d %7s %7s %7s %d\n", t, n[t], s[t], e[t], cov[t],
                                 ft[t], corp[t], bad[t] + 0 }' | sort |
    { printf "%-22s %5s %9s %14s %7s %7s %7s %s\n" target runs seconds executions cov ft corpus failures; cat; }
  exit 0
fi

targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for exe in "$build"/tests/fuzz/fuzz-*; do [ -x "$exe" ] && targets+=("${exe##*/fuzz-}"); done
fi
[ ${#targets[@]} -gt 0 ] || { echo "no fuzz targets in $build/tests/fuzz: configure with -DSPILLWAY_FUZZ=ON" >&2; exit 1; }

failed=0
for name in "${targets[@]}"; do
  exe="$build/tests/fuzz/fuzz-$name" work="$build/tests/fuzz/$name"
  flags=()
  [ "$name" = run-store ] && flags+=(-max_len=262144)  # as tests/fuzz/CMakeLists.txt gives it
  before=$(ls "$work" 2>/dev/null | grep -cE '^(crash|leak|timeout|oom)-')
  start=$(date +%s)
  bash "$here/run-fuzz.sh" "$exe" "$seconds" "$work" "${flags[@]}" >/dev/null
  status=$?
  # The seconds it ran: fewer than asked when it stopped at a crash.
  ran=$(( $(date +%s) - start )); [ "$ran" -lt "$seconds" ] || ran=$seconds
  log="$work/fuzz.log"
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  rss=$(sed -n 's/^stat::peak_rss_mb: *//p' "$log" | tail -1)
  last=$(grep -E '^#[0-9]+\s' "$log" | tail -1)
  cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
  ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
  corpus=$(ls "$work/corpus" | wc -l)
  result=ok
  if [ $status -ne 0 ]; then
    failed=1
    result=$(ls -t "$work" | grep -E '^(crash|leak|timeout|oom)-' | head -1)
    result=${result:-exit-$status}
    [ "$(ls "$work" | grep -cE '^(crash|leak|timeout|oom)-')" -gt "$before" ] || result="exit-$status"
  fi
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$(date -u +%FT%TZ)" "$name" "$ran" \
    "${execs:-0}" "${rate:-0}" "${cov:--}" "${ft:--}" "$corpus" "${rss:--}" "$result" | tee -a "$tsv"
done
exit $failed

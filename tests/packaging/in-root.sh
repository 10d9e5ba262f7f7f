#!/usr/bin/env bash
# Runs inside the clean Debian 12 root of install-test.sh, as root, after `apt-get install
# ./spillway_*.deb`: what a user does first, as the user `tester`. Each step prints what it saw; a
# failed check exits 1. Argument: the spillway-cuda .deb's file name in /debs, or nothing.
set -euo pipefail
cuda_deb=${1:-}
home=/home/tester
data=$home/.local/share/spillway
# "${as_user[@]}" CMD runs CMD as tester. setpriv and env execute it in place (no fork, unlike su),
# so after "${as_user[@]}" CMD &, $! is the program's own pid.
as_user=(setpriv --reuid=tester --regid=tester --init-groups env HOME=$home PATH=/usr/bin:/bin LANG=C.UTF-8)
cd "$home"
step() { printf '\n---- %s\n' "$*"; }
fail() { echo "FAILED: $*"; exit 1; }

step "the programs, found on the PATH; the built-in jobs"
command -v spillway spillway-worker
"${as_user[@]}" spillway-worker --help > /tmp/help.txt && head -2 /tmp/help.txt
ls -l /usr/share/spillway/jobs

step "spillway-worker train /usr/share/spillway/jobs/default.json: 5 steps, then SIGTERM (checkpoint, stop)"
"${as_user[@]}" spillway-worker train /usr/share/spillway/jobs/default.json --json > /tmp/train.out 2> /tmp/train.err &
worker=$!
for _ in $(seq 600); do [ -s /tmp/train.out ] && break; sleep 0.1; done
run_dir=$(head -1 /tmp/train.out | sed -n 's/.*"run_dir":"\([^"]*\)".*/\1/p')
[ -n "$run_dir" ] || { cat /tmp/train.out /tmp/train.err; fail "train printed no run folder"; }
echo "run folder: $run_dir"
steps=0
for _ in $(seq 2400); do
  steps=$(grep -c '"type":"step"' "$run_dir/events.jsonl" 2> /dev/null || true)
  [ "${steps:-0}" -ge 5 ] && break
  kill -0 "$worker" 2> /dev/null || break
  sleep 0.25
done
[ "${steps:-0}" -ge 5 ] || { cat /tmp/train.err; fail "the worker did not reach step 5"; }
kill -TERM "$worker"
rc=0 && wait "$worker" || rc=$?
sed 's/^/  /' /tmp/train.out /tmp/train.err | tail -8
[ "$rc" -eq 0 ] || fail "train exited $rc after SIGTERM"
echo "the run database, $data/runs.db:"
sqlite3 -header -column "$data/runs.db" "SELECT id, status, name FROM runs"
status=$(sqlite3 "$data/runs.db" "SELECT status FROM runs")
[ "$status" = stopped ] || fail "the run's status is '$status', expected stopped"
echo "steps recorded: $(sqlite3 "$data/runs.db" "SELECT count(*) FROM metrics")"
find "$run_dir" -maxdepth 2 | sed "s#^$home#  ~#" | sort

step "spillway under Xvfb, opening the built-in job from the command line"
# A free display number, chosen by Xvfb (-displayfd writes it once the server accepts clients): the
# root shares the host's network namespace, so a fixed display collided with an X server of the
# host on the same number (its abstract socket): "server already running", and the app had none.
Xvfb -displayfd 3 -screen 0 1600x1000x24 -nolisten tcp 3> /tmp/xvfb.display > /tmp/xvfb.log 2>&1 &
xvfb=$!
for _ in $(seq 300); do [ -s /tmp/xvfb.display ] && break; kill -0 "$xvfb" 2> /dev/null || break; sleep 0.1; done
[ -s /tmp/xvfb.display ] || { cat /tmp/xvfb.log; fail "Xvfb did not start"; }
display=:$(head -1 /tmp/xvfb.display)
echo "Xvfb on display $display"
mkdir -p /tmp/screenshots /tmp/runtime-tester && chown tester /tmp/screenshots /tmp/runtime-tester
chmod 700 /tmp/runtime-tester
"${as_user[@]}" env DISPLAY=$display XDG_RUNTIME_DIR=/tmp/runtime-tester spillway --screenshot /tmp/screenshots --wait 8 \
  /usr/share/spillway/jobs/default.json > /tmp/app.log 2>&1 &
app=$!
shown=""
# Up to 60 s: on the shared 2-core machine under load the app took more than 20 s to map its window.
# The app's own window, found by its WM_CLASS: Qt's client leader (a 1 x 1 window that is never
# mapped, WM_CLIENT_LEADER of the others) carries the application's name too, and
# `xwininfo -name Spillway` found it first.
for _ in $(seq 600); do
  id=$(xwininfo -display "$display" -root -tree 2> /dev/null |
    grep -E '^ +0x[0-9a-f]+ "Spillway": \("spillway" "Spillway"\)' | awk '{print $1}' | head -1 || true)
  shown=""
  [ -n "$id" ] && shown=$(xwininfo -display "$display" -id "$id" 2> /dev/null || true)
  echo "$shown" | grep -q 'Map State: IsViewable' && break
  kill -0 "$app" 2> /dev/null || break
  sleep 0.1
done
if ! echo "$shown" | grep -q 'Map State: IsViewable'; then
  if kill -0 "$app" 2> /dev/null; then echo "spillway (pid $app) is still running"; else
    rc=0 && wait "$app" || rc=$?
    echo "spillway exited $rc"
  fi
  sed 's/^/  app: /' /tmp/app.log
  sed 's/^/  Xvfb: /' /tmp/xvfb.log
  xwininfo -display "$display" -root -tree 2> /dev/null | grep -E '^ +0x' | head -10 | sed 's/^/  window: /' || true
  fail "no window named Spillway was shown"
fi
echo "$shown" | grep -E 'Window id|Width|Height|Map State' | sed 's/^ */  /'
rc=0 && wait "$app" || rc=$?
sed 's/^/  app: /' /tmp/app.log
kill "$xvfb" 2> /dev/null || true
[ "$rc" -eq 0 ] || fail "spillway exited $rc"
ls -l /tmp/screenshots
[ -s /tmp/screenshots/new-run.png ] && [ -s /tmp/screenshots/history.png ] || fail "no screenshots"

step "man spillway-worker"
MANWIDTH=80 man spillway-worker > /tmp/man.txt 2> /tmp/man.err
head -24 /tmp/man.txt
[ ! -s /tmp/man.err ] || { cat /tmp/man.err; fail "man printed errors"; }
for page in spillway spillway-worker; do
  MANWIDTH=80 man --warnings -E UTF-8 "$page" 2>&1 > /dev/null | tee /tmp/man.warn
  [ ! -s /tmp/man.warn ] || fail "man $page: groff warnings"
done
echo "(man spillway and man spillway-worker render without warnings)"

step "desktop integration"
ls /usr/share/applications/org.spillway.Spillway.desktop /usr/share/metainfo/org.spillway.Spillway.metainfo.xml \
  /usr/share/mime/packages/spillway.xml /usr/share/icons/hicolor/*/apps/org.spillway.Spillway.*
if command -v update-mime-database > /dev/null; then
  [ -f /usr/share/mime/application/x-spillway-job+json.xml ] || fail "the MIME type is not in the MIME database"
  echo "MIME database: application/x-spillway-job+json registered"
fi

if [ -n "$cuda_deb" ]; then
  step "spillway-cuda on a machine without NVIDIA software"
  rc=0 && "${as_user[@]}" spillway-worker probe --backend cuda > /tmp/probe.out 2>&1 || rc=$?
  echo "before: $(cat /tmp/probe.out)"
  [ "$rc" -ne 0 ] && grep -q 'install the spillway-cuda package' /tmp/probe.out ||
    fail "probe --backend cuda without spillway-cuda: expected a message naming the package"
  DEBIAN_FRONTEND=noninteractive apt-get install -y "/debs/$cuda_deb" > /tmp/cuda-install.log 2>&1 ||
    { tail -20 /tmp/cuda-install.log; fail "apt-get install spillway-cuda"; }
  grep -E '^(Setting up|Recommended packages)' -A1 /tmp/cuda-install.log | head -6 || true
  dpkg -L spillway-cuda | grep '\.so$'
  rc=0 && "${as_user[@]}" spillway-worker probe --backend cuda > /tmp/probe.out 2>&1 || rc=$?
  echo "after: $(cat /tmp/probe.out)"
  [ "$rc" -ne 0 ] && grep -q libcublasLt /tmp/probe.out || fail "probe --backend cuda: expected a message naming libcublasLt, got exit $rc"
  "${as_user[@]}" spillway-worker plan /usr/share/spillway/jobs/default.json > /tmp/plan.out 2>&1 || { cat /tmp/plan.out; fail "plan with spillway-cuda installed"; }
  echo "plan of the built-in job still runs on the CPU: $(grep -m1 -i 'step' /tmp/plan.out || true)"
fi
echo
echo "in-root checks passed"

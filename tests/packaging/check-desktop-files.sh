#!/usr/bin/env bash
# Checks the desktop integration files as they are installed (CTest packaging_desktop_files):
# the desktop entry (desktop-file-validate), the AppStream metainfo as configured
# (appstreamcli validate), the MIME type (a job.json and a NAME.spillway.json are
# application/x-spillway-job+json, another .json stays application/json, through shared-mime-info
# and GIO as a file manager sees them), the hicolor PNGs (each as large as its folder says), and
# that both man pages render without a groff warning.
# usage: tests/packaging/check-desktop-files.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src=$1
build=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failed=0
fail() { echo "FAILED: $*"; failed=1; }

desktop="$src/resources/org.spillway.Spillway.desktop"
out=$(desktop-file-validate "$desktop" 2>&1) || fail "desktop-file-validate: $out"
if echo "$out" | grep -qiE 'error|warning'; then fail "desktop-file-validate: $out"; fi
echo "desktop-file-validate: ok${out:+ ($out)}"

metainfo="$build/packaging/org.spillway.Spillway.metainfo.xml"
appstreamcli validate --no-net --pedantic "$metainfo" || fail "appstreamcli validate $metainfo"

mkdir -p "$work/share/mime/packages" "$work/jobs"
cp "$src/resources/spillway-mime.xml" "$work/share/mime/packages/spillway.xml"
cp /usr/share/mime/packages/freedesktop.org.xml "$work/share/mime/packages/"
# (It notes on stderr that the folder is not on XDG_DATA_DIRS, which is the point here.)
update-mime-database "$work/share/mime" 2> "$work/update-mime-database.err" ||
  fail "update-mime-database: $(cat "$work/update-mime-database.err")"
echo '{}' > "$work/jobs/job.json"
echo '{}' > "$work/jobs/llama-7b.spillway.json"
echo '{}' > "$work/jobs/other.json"
for f in job.json:application/x-spillway-job+json llama-7b.spillway.json:application/x-spillway-job+json \
         other.json:application/json; do
  type=$(XDG_DATA_HOME="$work/none" XDG_DATA_DIRS="$work/share" gio info -a standard::content-type \
           "$work/jobs/${f%%:*}" 2> /dev/null | sed -n 's/.*standard::content-type: //p')
  [ "$type" = "${f#*:}" ] || fail "MIME type of ${f%%:*}: '$type', expected ${f#*:}"
  echo "MIME: ${f%%:*} is $type"
done

for png in "$src"/resources/icons/hicolor/*/apps/*.png; do
  size=$(basename "$(dirname "$(dirname "$png")")")
  # The PNG's IHDR: width and height, big-endian, at bytes 16-23.
  actual=$(od -An -tu1 -j16 -N8 "$png" | awk '{printf "%dx%d", $1*16777216+$2*65536+$3*256+$4, $5*16777216+$6*65536+$7*256+$8}')
  [ "$actual" = "$size" ] || fail "$png is $actual"
done
echo "icons: $(ls "$src"/resources/icons/hicolor/*/apps/*.png | wc -l) PNGs of the sizes their folders name"

for page in "$src"/packaging/man/*.1; do
  warnings=$(LC_ALL=C.UTF-8 MANWIDTH=80 man --warnings -E UTF-8 -l "$page" 2>&1 > /dev/null)
  [ -z "$warnings" ] || fail "$(basename "$page"): $warnings"
done
echo "man pages: render without warnings"
exit $failed

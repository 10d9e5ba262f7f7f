#!/usr/bin/env bash
# Renders the hicolor PNG icons from resources/icons/spillway.svg (48 px and up) and
# spillway-small.svg (16-32 px, without the labels) with rsvg-convert (librsvg2-bin), then
# compresses them losslessly with optipng when it is there. The PNGs are committed, so a build needs
# neither tool nor the fonts the labels use; run this after changing either SVG.
set -euo pipefail
cd "$(dirname "$0")/../resources/icons"
for size in 16 22 24 32 48 64 128 256 512; do
  src=spillway.svg
  [ "$size" -le 32 ] && src=spillway-small.svg
  dir=hicolor/${size}x${size}/apps
  mkdir -p "$dir"
  rsvg-convert -w "$size" -h "$size" "$src" -o "$dir/org.spillway.Spillway.png"
  if command -v optipng > /dev/null; then optipng -quiet -o7 -strip all "$dir/org.spillway.Spillway.png"; fi
done
ls -l hicolor/*/apps/*.png

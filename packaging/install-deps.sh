#!/usr/bin/env bash
# Installs the Debian 12 packages that Spillway's build and tests need; with --packaging also what
# the install test of the Debian packages needs (tests/packaging/install-test.sh: lintian,
# debootstrap). Idempotent and non-interactive; run as root (or through sudo).
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git
  libgtest-dev libgmock-dev
  nlohmann-json3-dev libpcre2-dev
  libsentencepiece-dev
  liburing-dev libopenblas-dev
  libsqlite3-dev sqlite3
  qt6-base-dev qt6-base-dev-tools libqt6sql6-sqlite libqt6svg6-dev
  libqcustomplot-dev
  xvfb xauth
  libicu-dev
  fortunes
  # A model's own chat template is rendered by Python's jinja2 (engine/data/chat_template.py), as
  # the Debian package depends.
  python3 python3-jinja2
  # The packaging tests (label packaging): the man-page check, the desktop entry, AppStream
  # metainfo and MIME type validators, and dpkg-shlibdeps for cpack -G DEB.
  python3 man-db desktop-file-utils appstream shared-mime-info libglib2.0-bin dpkg-dev
  # The sanitizer and fuzzing build of CI (.ci/run): clang, and libFuzzer with the ASan/UBSan/TSan
  # runtimes (libclang-rt-14-dev).
  clang libclang-rt-14-dev
  # The format check (tests/format-check.sh, label format): the tree as clang-format 14 makes it.
  clang-format
)

if [ "${1:-}" = --packaging ]; then
  packages+=(lintian debootstrap)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages already installed"
  exit 0
fi

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "install-deps: installed ${missing[*]}"

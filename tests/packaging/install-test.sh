#!/usr/bin/env bash
# The install test of the Debian packages (issue 14). In BUILD_DIR it builds the packages with CPack
# and runs lintian on them; then it makes a clean Debian 12 root with debootstrap, installs
# spillway_*.deb there with `apt-get install ./spillway_*.deb` (its dependencies from the Debian
# mirror, nothing else), and inside it (tests/packaging/in-root.sh) trains the built-in job for a
# few steps, starts the app under Xvfb and takes its screenshots, renders the man pages; then it
# purges the packages and shows that nothing of them is left outside the user's data folders.
#
# usage: tests/packaging/install-test.sh BUILD_DIR
# CTest runs it as packaging_install_test (label packaging) when SPILLWAY_PACKAGING_TEST=1, as
# .ci/run does; otherwise that test is skipped (it needs root and a mirror, and takes minutes).
#
# Needs root (debootstrap, chroot, mounts), the tools of `packaging/install-deps.sh --packaging`
# and a Debian mirror (SPILLWAY_DEBIAN_MIRROR, default http://deb.debian.org/debian). The
# debootstrapped root (a tarball) and apt's downloads are cached in SPILLWAY_PKGTEST_CACHE (default
# /var/cache/spillway-pkgtest), so a rerun takes a few minutes; each run unpacks a fresh root.
# The build runs under flock on SPILLWAY_BUILD_LOCK (default /tmp/spillway-build.lock), so a build
# folder shared by several people is never built twice at once.
# Writes its report to BUILD_DIR/packaging-test/: the .deb files, packages.txt (control fields,
# sizes, contents), lintian.txt, install.log, in-root.log, screenshots/, left.txt, timings.txt.
# Exit 0 when every check holds, 77 when skipped, 1 otherwise.
set -euo pipefail

[ $# -eq 1 ] || { echo "usage: $0 BUILD_DIR" >&2; exit 2; }
build=$(cd "$1" && pwd)
src=$(cd "$(dirname "$0")/../.." && pwd)
here="$src/tests/packaging"
out="$build/packaging-test"
cache=${SPILLWAY_PKGTEST_CACHE:-/var/cache/spillway-pkgtest}
mirror=${SPILLWAY_DEBIAN_MIRROR:-http://deb.debian.org/debian}
lock=${SPILLWAY_BUILD_LOCK:-/tmp/spillway-build.lock}
root="$cache/root"

if [ "${SPILLWAY_FROM_CTEST:-0}" = 1 ] && [ "${SPILLWAY_PACKAGING_TEST:-0}" != 1 ]; then
  echo "install test skipped: set SPILLWAY_PACKAGING_TEST=1 (needs root, a Debian mirror and minutes), as .ci/run does"
  exit 77
fi
if [ "$(id -u)" -ne 0 ]; then echo "install test: needs root (debootstrap, chroot)"; exit 77; fi
for tool in debootstrap lintian dpkg-deb dpkg-shlibdeps cpack desktop-file-validate appstreamcli flock; do
  command -v "$tool" > /dev/null || { echo "install test: $tool is missing: run bash packaging/install-deps.sh --packaging"; exit 1; }
done

rm -rf "$out" && mkdir -p "$out/screenshots" "$cache"
timings="$out/timings.txt"
t_all=$(date +%s)
phase() {  # phase NAME COMMAND...: runs it, records its seconds
  local t0 rc=0
  t0=$(date +%s.%N)
  "${@:2}" || rc=$?
  printf '%-28s %6s s\n' "$1" "$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')" | tee -a "$timings"
  return $rc
}
fail() { echo "install test FAILED: $*" >&2; exit 1; }

# ---- 1. the packages ----
build_tree() {
  flock "$lock" cmake --build "$build" > "$out/build.log" 2>&1 || { tail -30 "$out/build.log"; return 1; }
}
make_packages() {
  (cd "$build" && flock "$lock" cpack -G DEB -B "$out/cpack") > "$out/cpack.log" 2>&1 || { tail -30 "$out/cpack.log"; return 1; }
  mv "$out"/cpack/*.deb "$out/" && rm -rf "$out/cpack"
}
phase "build (waits for the lock)" build_tree || fail "the build"
phase "cpack -G DEB" make_packages || fail "cpack"
debs=("$out"/*.deb)
base_deb=$(ls "$out"/spillway_*.deb)
{
  for deb in "${debs[@]}"; do
    echo "== $(basename "$deb"): $(stat -c %s "$deb") bytes"
    dpkg-deb --field "$deb" Package Version Architecture Installed-Size Depends Recommends Suggests Section
    dpkg-deb --contents "$deb" | awk '{print $1, $3, $6, $7, $8}'
  done
} > "$out/packages.txt"
for deb in "${debs[@]}"; do
  echo "$(basename "$deb"): $(stat -c %s "$deb") bytes, Installed-Size $(dpkg-deb --field "$deb" Installed-Size) KiB"
  echo "  Depends: $(dpkg-deb --field "$deb" Depends)"
  echo "  Recommends: $(dpkg-deb --field "$deb" Recommends)  Suggests: $(dpkg-deb --field "$deb" Suggests)"
done

# ---- 2. lintian and the desktop metadata in the package ----
lint() {
  # -I: informational tags too, so the README's figure is the whole output; errors fail the test.
  lintian -I --fail-on error "${debs[@]}" > "$out/lintian.txt" 2>&1
}
phase "lintian" lint || { cat "$out/lintian.txt"; fail "lintian reports errors"; }
echo "lintian: $(grep -c '^E:' "$out/lintian.txt" || true) errors, $(grep -c '^W:' "$out/lintian.txt" || true) warnings, $(grep -c '^I:' "$out/lintian.txt" || true) infos"
cat "$out/lintian.txt"
tree=$(mktemp -d) && trap 'rm -rf "$tree"' EXIT
dpkg-deb -x "$base_deb" "$tree"
desktop-file-validate "$tree/usr/share/applications/org.spillway.Spillway.desktop" || fail "desktop-file-validate"
appstreamcli validate-tree --no-net "$tree" || fail "appstreamcli validate-tree"

# ---- 3. a clean Debian 12 root ----
# Unmounts whatever is mounted below DIR (this run's mounts, or a killed run's), deepest first, so
# that removing a root can never reach the host's /dev or the apt cache.
unmount_under() {
  awk -v d="$1/" 'index($5, d) == 1 { print $5 }' /proc/self/mountinfo | sort -r |
    while read -r m; do umount -l "$m" || true; done
}
unmount_root() { unmount_under "$root"; }
make_base() {
  local stage="$cache/stage"
  unmount_under "$stage"
  rm -rf --one-file-system "$stage"
  debootstrap --variant=minbase bookworm "$stage" "$mirror" > "$cache/debootstrap.log" 2>&1 ||
    { tail -20 "$cache/debootstrap.log"; return 1; }
  cat > "$stage/etc/apt/sources.list" <<EOF
deb $mirror bookworm main
deb $mirror bookworm-updates main
deb http://security.debian.org/debian-security bookworm-security main
EOF
  # The test's own tools (not the package's dependencies): Xvfb and xwininfo to show the window,
  # man to render the pages, sqlite3 to read the run database.
  chroot "$stage" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive chroot "$stage" apt-get install -y -qq --no-install-recommends \
    xvfb xauth x11-utils man-db sqlite3 > "$cache/tools.log" 2>&1 || { tail -20 "$cache/tools.log"; return 1; }
  chroot "$stage" apt-get clean
  chroot "$stage" useradd --create-home --shell /bin/bash tester
  tar --numeric-owner -C "$stage" -cf "$cache/bookworm-base.tar.partial" .
  mv "$cache/bookworm-base.tar.partial" "$cache/bookworm-base.tar"
  rm -rf --one-file-system "$stage"
}
if [ ! -f "$cache/bookworm-base.tar" ]; then
  phase "debootstrap (cached after)" make_base || fail "debootstrap of bookworm from $mirror"
fi

cleanup() {
  unmount_root
  rm -rf "$tree"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
unpack_root() {
  unmount_root
  rm -rf --one-file-system "$root" && mkdir -p "$root" && tar --numeric-owner -C "$root" -xf "$cache/bookworm-base.tar"
}
phase "fresh root from the cache" unpack_root
mkdir -p "$cache/archives/partial"
for m in proc sys dev dev/pts tmp var/cache/apt/archives; do
  case $m in
    proc) mount -t proc proc "$root/proc" ;;
    sys) mount -t sysfs sys "$root/sys" ;;
    dev) mount --bind /dev "$root/dev" ;;
    dev/pts) mount --bind /dev/pts "$root/dev/pts" ;;
    tmp) mount -t tmpfs -o mode=1777 tmpfs "$root/tmp" ;;
    var/cache/apt/archives) mount --bind "$cache/archives" "$root/var/cache/apt/archives" ;;
  esac
done
cp /etc/resolv.conf "$root/etc/resolv.conf"

# Every path of the root before the package, to compare with after the purge. Left out: what
# apt, dpkg and the kernel change on their own (package lists, dpkg's database, logs, caches).
list_files() {
  chroot "$root" find / -xdev \( -path /proc -o -path /sys -o -path /dev -o -path /tmp -o -path /run \
    -o -path /var/lib/apt -o -path /var/lib/dpkg -o -path /var/cache -o -path /var/log \
    -o -path /var/lib/systemd \) -prune -o -print | sort
}
chroot "$root" apt-get update -qq
list_files > "$out/files-before.txt"

# ---- 4. install: apt-get install ./spillway_*.deb ----
mkdir -p "$root/debs" && cp "${debs[@]}" "$root/debs/"
install_base() {
  DEBIAN_FRONTEND=noninteractive chroot "$root" apt-get install -y "./debs/$(basename "$base_deb")" > "$out/install.log" 2>&1
}
phase "apt-get install ./spillway" install_base || { tail -30 "$out/install.log"; fail "apt-get install"; }
list_files > "$out/files-installed.txt"
echo "installed with $(grep -c '^Setting up' "$out/install.log") packages from Debian: $(grep -A3 'NEW packages' "$out/install.log" | head -1)"
chroot "$root" dpkg-query -W -f='${Package} ${Version}: Depends: ${Depends}\n  Recommends: ${Recommends}\n' spillway
chroot "$root" dpkg -L spillway > "$out/spillway-files.txt"
# The package runs no maintainer script: what it leaves after a purge can only be its files.
scripts=$(dpkg-deb --ctrl-tarfile "$base_deb" | tar -t | grep -vxE '\./|\./control|\./md5sums' || true)
[ -z "$scripts" ] || fail "spillway has maintainer scripts: $scripts"

# ---- 5. inside: train, the app, man, the CUDA package without NVIDIA software ----
cp "$here/in-root.sh" "$root/tmp/in-root.sh"
run_inside() {
  chroot "$root" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 \
    bash /tmp/in-root.sh "$(ls "$out" | grep -m1 '^spillway-cuda_' || true)" 2>&1 | tee "$out/in-root.log"
  return "${PIPESTATUS[0]}"
}
phase "inside: train, app, man" run_inside || fail "inside the root (in-root.log)"
cp "$root"/tmp/screenshots/*.png "$out/screenshots/" 2> /dev/null || true
cp "$root/tmp/screen.xwd" "$out/screenshots/" 2> /dev/null || true

# ---- 6. purge, and what is left ----
purge() {
  local pkgs=spillway
  chroot "$root" dpkg -s spillway-cuda > /dev/null 2>&1 && pkgs="spillway spillway-cuda"
  DEBIAN_FRONTEND=noninteractive chroot "$root" apt-get purge -y $pkgs > "$out/purge.log" 2>&1 &&
    DEBIAN_FRONTEND=noninteractive chroot "$root" apt-get autoremove --purge -y >> "$out/purge.log" 2>&1
}
phase "apt-get purge + autoremove" purge || { tail -20 "$out/purge.log"; fail "purge"; }
rm -rf "$root/debs"
list_files > "$out/files-after.txt"
# What is there now and was not in the clean root: the user's data folders (kept, as any package
# keeps what a user made: README, "Remove everything"), else a failure unless it was already there
# right after `apt-get install` and is not the package's: then a dependency's maintainer script
# made it (systemd's /etc/machine-id, ...), and Debian's purge of that dependency leaves it.
comm -13 "$out/files-before.txt" "$out/files-after.txt" > "$out/new-files.txt"
user_data='^/home/tester/(\.local/share/spillway|\.config/Spillway|\.cache)(/|$)|^/home/tester/(\.local/share|\.local|\.config)$'
grep -Ev "$user_data" "$out/new-files.txt" > "$out/left-all.txt" || true
: > "$out/left.txt" && : > "$out/left-by-dependencies.txt"
while read -r f; do
  if grep -qxF "$f" "$out/spillway-files.txt" || ! grep -qxF "$f" "$out/files-installed.txt"; then
    echo "$f" >> "$out/left.txt"
  else
    echo "$f" >> "$out/left-by-dependencies.txt"
  fi
done < "$out/left-all.txt"
echo "after the purge, in the user's data folders (kept): $(grep -cE "$user_data" "$out/new-files.txt" || true) paths"
grep -E '^/home/tester/(\.local/share/spillway|\.config/Spillway)$|runs.db$|/runs/[^/]+$' "$out/new-files.txt" | sed 's/^/  /'
if [ -s "$out/left-by-dependencies.txt" ]; then
  echo "left by the maintainer scripts of dependencies, already there right after the install (not files of spillway):"
  sed 's/^/  /' "$out/left-by-dependencies.txt"
fi
[ ! -s "$out/left.txt" ] || { cat "$out/left.txt"; fail "files of the package or of its runs are left after the purge (left.txt)"; }
echo "left of spillway outside the user's data folders: nothing"

printf '%-28s %6d s\n' "total" "$(($(date +%s) - t_all))" | tee -a "$timings"
echo "install test passed; report in $out"

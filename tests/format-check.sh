#!/usr/bin/env bash
# The tree's C++ and CUDA sources are as clang-format makes them with the repository's
# .clang-format: fails, naming each file and line, when clang-format would change one
# (docs/architecture.md, "Code style"). Formatting differs between clang-format versions, so the
# check runs with the version the tree is formatted with, Debian 12's clang-format 14, and is
# skipped (exit 77) with another.
# Usage: format-check.sh CLANG_FORMAT SOURCE_DIR
set -euo pipefail
fmt=$1
root=$2
version=$("$fmt" --version | sed -n 's/.*version \([0-9]*\).*/\1/p')
if [ "$version" != 14 ]; then
  echo "format-check: skipped: $fmt is version $version; the tree is formatted with clang-format 14 (Debian 12's)"
  exit 77
fi
cd "$root"
mapfile -d '' files < <(find app engine ui tests \( -name '*.cpp' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) -print0 | sort -z)
"$fmt" --dry-run --Werror "${files[@]}"
echo "format-check: ${#files[@]} files as clang-format $version makes them"

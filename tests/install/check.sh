#!/usr/bin/env bash
# find_package(deepwell) as a user meets it: install the build to a fresh
# prefix, build tests/install (a program outside the tree) against it with
# the exported targets, and run it.   tests/install/check.sh BUILD_DIR
set -euo pipefail
build=$1
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d /tmp/deepwell-install.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" > "$tmp/install.log"
cmake -S "$here" -B "$tmp/b" -DCMAKE_PREFIX_PATH="$tmp/prefix" > "$tmp/configure.log" ||
  { cat "$tmp/configure.log"; exit 1; }
cmake --build "$tmp/b" > "$tmp/build.log" || { cat "$tmp/build.log"; exit 1; }
"$tmp/b/consumer"
"$tmp/b/consumer_cache_only"

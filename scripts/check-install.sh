#!/usr/bin/env bash
# Installs the build in BUILD_DIR to a scratch prefix, then builds and runs examples/hello
# against it with find_package(kiln): the installed CMake package works from another project.
set -euo pipefail
build=$(cd "$1" && pwd)
src=$(cd "$(dirname "$0")/.." && pwd)
scratch="$build/install-check"
rm -rf "$scratch"
cmake --install "$build" --prefix "$scratch/prefix" >/dev/null
cmake -S "$src/examples/hello" -B "$scratch/hello" -DCMAKE_PREFIX_PATH="$scratch/prefix" >/dev/null
cmake --build "$scratch/hello" >/dev/null
out=$(LD_LIBRARY_PATH="$scratch/prefix/lib" "$scratch/hello/hello")
echo "$out"
grep -q "grad of w" <<<"$out"
"$scratch/prefix/bin/kiln" info | grep -q "^kiln "

#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (build-fuzz/) and runs fuzz_safetensors for N seconds
# (default 60), seeded from tests/fixtures/safetensors. Needs clang and its libFuzzer runtime
# (Debian: clang, libclang-rt-14-dev or the libFuzzer shipped with clang-14).
# Usage: scripts/fuzz.sh [seconds] [extra libFuzzer flags...]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
shift || true
build=build-fuzz
CC="${CC:-clang}" CXX="${CXX:-clang++}" cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DKILN_BUILD_TESTS=OFF -DKILN_BUILD_BENCH=OFF -DKILN_WITH_ONEDNN=OFF -DKILN_WITH_CUDA=OFF \
  ${KILN_FUZZ_CMAKE_ARGS:-}
cmake --build "$build" -j"${JOBS:-2}" --target fuzz_safetensors
# The corpus grows in build-fuzz/corpus; the committed fixtures seed it and are never modified.
corpus="$build/corpus/safetensors"
mkdir -p "$corpus" "$build/artifacts"
ASAN_OPTIONS="${ASAN_OPTIONS:-allocator_may_return_null=1}" \
  "$build/fuzz/fuzz_safetensors" -max_total_time="$seconds" -rss_limit_mb=4096 -max_len=65536 \
  -artifact_prefix="$build/artifacts/" -dict=fuzz/safetensors.dict "$@" "$corpus" tests/fixtures/safetensors

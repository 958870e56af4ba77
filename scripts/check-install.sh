#!/usr/bin/env bash
# Installs the build in BUILD_DIR to a scratch prefix, then builds the examples against it with
# find_package(kiln) and only #include <kiln/kiln.h>, and runs each: the installed package works.
set -euo pipefail
build=$(cd "$1" && pwd)
src=$(cd "$(dirname "$0")/.." && pwd)
scratch="$build/install-check"
rm -rf "$scratch"
cmake --install "$build" --prefix "$scratch/prefix" >/dev/null
export LD_LIBRARY_PATH="$scratch/prefix/lib"
"$scratch/prefix/bin/kiln" info | grep -q "^kiln "

# example, then the line its output must contain, then its arguments
check() {
  local name=$1 want=$2
  shift 2
  cmake -S "$src/examples/$name" -B "$scratch/$name" -DCMAKE_PREFIX_PATH="$scratch/prefix" >/dev/null
  cmake --build "$scratch/$name" >/dev/null
  local out
  out=$(OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} "$scratch/$name/$name" "$@")
  echo "== $name"
  echo "$out"
  grep -qE "$want" <<<"$out" || { echo "check-install: $name printed no line matching '$want'" >&2; exit 1; }
}

check hello "grad of w"
# A CNN on Fashion-MNIST: 150 steps reach well over 70% (about 80% here).
check mnist_cnn "test accuracy ([7-9][0-9]|100)(\.[0-9]+)?% after 150 steps" /usr/share/datasets/fashion-mnist 150
# BERT from transformers' save_pretrained files (a tiny model, 100-token vocabulary), fine-tuned.
check bert_finetune "training sentences right" "$src/tests/fixtures/bert/hf_tiny" "$src/examples/bert_finetune/vocab.txt" 40
check custom_function "^gradgradcheck passed"

#!/usr/bin/env bash
# On a machine with an NVIDIA GPU: build with CUDA, run the tests (the device rows included)
# and the benches, and leave logs in OUTDIR. Usage: scripts/gpu-check.sh OUTDIR
set -uo pipefail
out=${1:?usage: scripts/gpu-check.sh OUTDIR}
mkdir -p "$out"
cd "$(dirname "$0")/.."
{
  nvidia-smi || true
  nproc
} >"$out/machine.txt" 2>&1
scripts/install-deps.sh >"$out/deps.log" 2>&1
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DKILN_WITH_CUDA=ON >"$out/configure.log" 2>&1 || { echo "configure failed"; tail -30 "$out/configure.log"; exit 1; }
cmake --build build-gpu -j "$(nproc)" >"$out/build.log" 2>&1 || { echo "build failed"; grep -m 20 error "$out/build.log"; exit 1; }
build-gpu/tools/kiln/kiln info | tee "$out/info.txt"
(cd build-gpu && ctest --output-on-failure -j 8 >"$out/ctest.log" 2>&1); echo "ctest exit $?"; tail -5 "$out/ctest.log"
KILN_FALLBACK=warn build-gpu/bench/bench_overhead --benchmark_min_time=0.2 >"$out/bench_overhead.txt" 2>&1
tail -8 "$out/bench_overhead.txt"
# The main job and a whole model on the device (every op falls back to the CPU until the CUDA
# kernels land; the fallback counts show which).
(cd "$out" && timeout 300 "$OLDPWD/build-gpu/tools/kiln/kiln" train --device cuda --epochs 1 --max-steps 50 --checkpoint-dir "$out/ckpt") >"$out/train.log" 2>&1
tail -5 "$out/train.log"
# kiln bench on the CPU and every GPU (speed-ups over the CPU), fp32 and bf16, small batches.
timeout 240 build-gpu/tools/kiln/kiln bench --quick --models resnet50,bert-base --dtypes fp32,bf16 --steps 2 --out "$out/bench" >"$out/bench.txt" 2>&1
tail -12 "$out/bench.txt"
# BERT on the device: the MLM job for a few steps, and the transformer bench.
(cd "$out" && timeout 300 "$OLDPWD/build-gpu/tools/kiln/kiln" train --model bert-mini --device cuda --max-steps 20 --eval-every 10 --checkpoint-dir "$out/ckpt-bert") >"$out/train_bert.log" 2>&1
tail -5 "$out/train_bert.log"

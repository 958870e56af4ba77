#!/usr/bin/env bash
# Configures the GPU check's build as the lent GPU machines have it, on this machine (no GPU
# needed): the CUDA toolkit without its cuDNN and NCCL (there they exist only inside PyTorch's
# nvidia-cudnn-cu13 and nvidia-nccl-cu13 wheels), no oneDNN, no MPI; then compiles the files that
# include cuDNN's and NCCL's headers against the wheels' versions. Catches what made the first
# version of this probe fail: the wheels' packages are namespace packages, found by __path__ only.
# Needs root (a private mount namespace hides the toolkit's copies) and PyPI (about 700 MB of
# wheels, kept in .gpu-wheels/). Usage: scripts/gpu-configure-check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
cuda=$(readlink -f "$(dirname "$(command -v nvcc)")/..")
wheels=$repo/.gpu-wheels
# The versions the first H200 machine had (PyTorch 2.11's wheels: cuDNN 9.19.0, NCCL 2.28.9; the
# index here has NCCL 2.27.7 below that, an older header being the safe side).
if [[ ! -d $wheels/site/nvidia/cudnn || ! -d $wheels/site/nvidia/nccl ]]; then
  mkdir -p "$wheels"
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_18_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d "$wheels" "nvidia-cudnn-cu13==9.19.0.*" "nvidia-nccl-cu13<=2.28.9"
  for w in "$wheels"/*.whl; do python3 -m zipfile -e "$w" "$wheels/site"; done
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# In a private mount namespace: each folder that holds cuDNN or NCCL is replaced by links to
# everything else in it.
unshare --mount --propagation private bash -s "$cuda" "$work" "$wheels/site" "$repo" <<'INNER'
set -euo pipefail
cuda=$1 work=$2 site=$3 repo=$4
for d in "$cuda/include" "$cuda/lib" /usr/local/include; do
  [[ -d $d ]] || continue
  orig=$work/orig$(echo "$d" | tr / _) shadow=$work/shadow$(echo "$d" | tr / _)
  mkdir -p "$orig" "$shadow"
  mount --bind "$d" "$orig"
  for f in "$orig"/*; do
    case $(basename "$f") in cudnn* | nccl* | libcudnn* | libnccl*) ;; *) ln -s "$f" "$shadow/" ;; esac
  done
  mount --bind "$shadow" "$d"
done
export PYTHONPATH=$site
build=$work/build
cmake -S "$repo" -B "$build" -DCMAKE_BUILD_TYPE=Release -DKILN_WITH_CUDA=ON -DKILN_WITH_ONEDNN=OFF -DKILN_WITH_MPI=OFF \
  -DKILN_BUILD_BENCH=OFF | grep "Kiln:"
grep -q "KILN_CUDNN_LIB:FILEPATH=$site/nvidia/cudnn/lib/" "$build/CMakeCache.txt" || { echo "FAIL: cuDNN not found in the wheel"; exit 1; }
grep -q "KILN_NCCL_LIB:FILEPATH=$site/nvidia/nccl/lib/" "$build/CMakeCache.txt" || { echo "FAIL: NCCL not found in the wheel"; exit 1; }
for o in backend/cuda/conv.cpp.o backend/cuda/cudnn.cpp.o backend/cuda/stream.cpp.o backend/cudnn_flags.cpp.o \
         backend/nccl/process_group_nccl.cpp.o; do
  make -s -C "$build/src" "$o" >/dev/null
done
grep -q "rpath.*$site/nvidia/cudnn/lib" "$build/src/CMakeFiles/kiln.dir/link.txt" || { echo "FAIL: no run path to the wheel's cuDNN"; exit 1; }
echo "PASS: cuDNN and NCCL from the wheels ($(ls "$site"/nvidia/cudnn/lib/libcudnn.so.*)), their users compile, libkiln's run path reaches them"
INNER

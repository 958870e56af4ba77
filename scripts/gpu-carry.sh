#!/usr/bin/env bash
# Copies into .gpu-carry/ (ignored by git) what scripts/gpu-check.sh needs on a GPU machine that has
# no Debian packages: GoogleTest's sources, zlib's headers and library, Debian's Fashion-MNIST
# (31 MB, for the CNN jobs) and oneDNN from this machine, and the commit this checkout is at. Name .gpu-carry in the device call's carry list.
# Usage: scripts/gpu-carry.sh
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf .gpu-carry
mkdir -p .gpu-carry/zlib/include .gpu-carry/zlib/lib
cp -r /usr/src/googletest .gpu-carry/googletest
cp /usr/include/zlib.h /usr/include/zconf.h .gpu-carry/zlib/include/
cp -L /usr/lib/x86_64-linux-gnu/libz.so.1 .gpu-carry/zlib/lib/libz.so.1
cp -r /usr/share/datasets/fashion-mnist .gpu-carry/fashion-mnist
# Debian's oneDNN (its library xz-compressed: 7 MB of the 64 MB a call carries) and the OpenCL
# loader it links, so that the GPU machine's CPU benchmark runs Kiln's CPU path at its best.
if [[ -f /usr/lib/x86_64-linux-gnu/libdnnl.so.2 && -f /usr/include/oneapi/dnnl/dnnl.hpp ]]; then
  mkdir -p .gpu-carry/dnnl/include .gpu-carry/dnnl/lib
  cp -r /usr/include/oneapi .gpu-carry/dnnl/include/
  xz -T2 -c /usr/lib/x86_64-linux-gnu/libdnnl.so.2 >.gpu-carry/dnnl/lib/libdnnl.so.2.xz
  cp -L /usr/lib/x86_64-linux-gnu/libOpenCL.so.1 .gpu-carry/dnnl/lib/ 2>/dev/null || true
fi
# The copy sent to the GPU machine may have no .git: the commit it is, for the summary and records.
commit=$(git rev-parse --short HEAD)
[[ -n $(git status --porcelain --untracked-files=no) ]] && commit+="+dirty"
echo "$commit" >.gpu-carry/commit
du -sh .gpu-carry
# A device call carries the tracked tree and .gpu-carry, 64 MiB in all: say so here, not there.
total=$(( $(git ls-files -z --cached --others --exclude-standard | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1) +
  $(du -sb .gpu-carry | cut -f1) ))
echo "carried in all: $((total / 1048576)) MiB of the 64 MiB a device call takes"
((total < 62 * 1048576)) || { echo "too much to carry: leave something out" >&2; exit 1; }

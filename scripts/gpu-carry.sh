#!/usr/bin/env bash
# Copies into .gpu-carry/ (ignored by git) what scripts/gpu-check.sh needs on a GPU machine that has
# no Debian packages: GoogleTest's sources, zlib's headers and library, and Debian's Fashion-MNIST
# (31 MB, for the CNN jobs) from this machine, and the commit this checkout is at. Name .gpu-carry in the device call's carry list.
# Usage: scripts/gpu-carry.sh
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf .gpu-carry
mkdir -p .gpu-carry/zlib/include .gpu-carry/zlib/lib
cp -r /usr/src/googletest .gpu-carry/googletest
cp /usr/include/zlib.h /usr/include/zconf.h .gpu-carry/zlib/include/
cp -L /usr/lib/x86_64-linux-gnu/libz.so.1 .gpu-carry/zlib/lib/libz.so.1
cp -r /usr/share/datasets/fashion-mnist .gpu-carry/fashion-mnist
# The copy sent to the GPU machine may have no .git: the commit it is, for the summary and records.
commit=$(git rev-parse --short HEAD)
[[ -n $(git status --porcelain --untracked-files=no) ]] && commit+="+dirty"
echo "$commit" >.gpu-carry/commit
du -sh .gpu-carry

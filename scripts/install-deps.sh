#!/usr/bin/env bash
# Installs what a fresh Debian 12 or 13 machine lacks to build and test Kiln (needs root).
set -euo pipefail
packages=(build-essential cmake git pkg-config libgtest-dev libgmock-dev libbenchmark-dev libdnnl-dev ocl-icd-opencl-dev opencl-headers zlib1g-dev
          libopenmpi-dev openmpi-bin
          dataset-fashion-mnist fortunes)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "installing: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

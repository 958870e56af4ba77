#!/usr/bin/env bash
# kiln bench --quick --models resnet18 completes (at batch 1 to stay cheap) and writes one JSON
# line per run (a skipped one included) and the chart; "cpu:0" is the CPU, the speed-ups' baseline.
# Usage: tests/bench_smoke.sh path/to/kiln
set -euo pipefail
kiln=${1:?usage: bench_smoke.sh KILN}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
OMP_NUM_THREADS=2 "$kiln" bench --quick --models resnet18 --devices cpu:0 --dtypes fp32,fp16 --batch 1 \
  --out "$tmp/out" >"$tmp/table.txt"
cat "$tmp/table.txt"
jsonl=$tmp/out/results.jsonl
lines=$(wc -l <"$jsonl")
[[ $lines -eq 4 ]] || { echo "FAIL: results.jsonl has $lines lines, want 4"; exit 1; }
grep -q '"model": "resnet18", "mode": "train", "device": "cpu",' "$jsonl" || { echo "FAIL: no cpu train line"; exit 1; }
grep -q '"model": "resnet18", "mode": "eval", "device": "cpu",' "$jsonl" || { echo "FAIL: no cpu eval line"; exit 1; }
skipped=$(grep -c '"dtype": "fp16", .*"skipped": "no fast float16 path on the CPU' "$jsonl" || true)
[[ $skipped -eq 2 ]] || { echo "FAIL: $skipped skipped fp16 lines, want 2"; exit 1; }
baselines=$(grep -c '"speedup_vs_cpu_fp32": 1,' "$jsonl" || true)
[[ $baselines -eq 2 ]] || { echo "FAIL: $baselines runs are their own CPU baseline, want 2"; exit 1; }
head -c 4 "$tmp/out/chart.svg" | grep -q '<svg' || { echo "FAIL: chart.svg does not start with <svg"; exit 1; }
bars=$(grep -c 'class="bar"' "$tmp/out/chart.svg")
[[ $bars -eq 2 ]] || { echo "FAIL: chart.svg has $bars bars, want 2"; exit 1; }
echo "ok"

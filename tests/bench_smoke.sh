#!/usr/bin/env bash
# kiln bench --quick --models resnet18 completes (at batch 1 to stay cheap) and writes one JSON
# line per run and the chart. Usage: tests/bench_smoke.sh path/to/kiln
set -euo pipefail
kiln=${1:?usage: bench_smoke.sh KILN}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
OMP_NUM_THREADS=2 "$kiln" bench --quick --models resnet18 --devices cpu --batch 1 --out "$tmp/out" >"$tmp/table.txt"
cat "$tmp/table.txt"
lines=$(wc -l <"$tmp/out/results.jsonl")
[[ $lines -eq 2 ]] || { echo "FAIL: results.jsonl has $lines lines, want 2"; exit 1; }
grep -q '"model": "resnet18", "mode": "train"' "$tmp/out/results.jsonl" || { echo "FAIL: no train line"; exit 1; }
grep -q '"model": "resnet18", "mode": "eval"' "$tmp/out/results.jsonl" || { echo "FAIL: no eval line"; exit 1; }
head -c 4 "$tmp/out/chart.svg" | grep -q '<svg' || { echo "FAIL: chart.svg does not start with <svg"; exit 1; }
bars=$(grep -c 'class="bar"' "$tmp/out/chart.svg")
[[ $bars -eq 2 ]] || { echo "FAIL: chart.svg has $bars bars, want 2"; exit 1; }
echo "ok"

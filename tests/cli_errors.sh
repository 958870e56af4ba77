#!/usr/bin/env bash
# The kiln command on bad input: exit status 1 and exactly one line on stderr, never a crash.
# Usage: tests/cli_errors.sh path/to/kiln
set -uo pipefail
kiln=${1:?usage: cli_errors.sh KILN}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf 'garbage' >"$tmp/bad.safetensors"
mkdir -p "$tmp/data" "$tmp/ck"
printf '\x00\x00\x08\x03\x00\x00\x00\x05' >"$tmp/data/train-images-idx3-ubyte"  # truncated header
printf '\x00\x00\x08\x01\x00\x00\x00\x05\x01\x02\x03\x04\x05' >"$tmp/data/train-labels-idx1-ubyte"
: >"$tmp/empty.txt"
printf 'abc\x00\x01\x02def' >"$tmp/binary.txt"
printf 'the cat sat on the mat\n' >"$tmp/one.txt"
printf 'hello\nworld\n' >"$tmp/vocab.txt"
fail=0
check() {
  local want=$1
  shift
  local err rc
  err=$("$kiln" "$@" 2>&1 >/dev/null)
  rc=$?
  # Under ASan a refused huge allocation also prints the sanitizer's own "==PID==WARNING" lines.
  err=$(printf '%s\n' "$err" | grep -v '^==[0-9]*==')
  local lines
  lines=$(printf '%s\n' "$err" | wc -l)
  if [[ $rc -ne 1 || $lines -ne 1 || "$err" != *"$want"* ]]; then
    echo "FAIL: kiln $* -> exit $rc, stderr: $err (want one line containing '$want')"
    fail=1
  fi
}
check "unknown option --bogus" train --bogus 1
check "--epochs expects an integer" train --epochs x
check "unknown model" train --model resnet7 --data "$tmp/data"
check "does not exist" train --data "$tmp/missing"
check "train-images-idx3-ubyte" train --data "$tmp/data"
check "cuda:3" train --device cuda:3
check "no checkpoint file" eval --checkpoint "$tmp/none.safetensors"
check "bad.safetensors" eval --checkpoint "$tmp/bad.safetensors"
check "last.safetensors" train --resume --checkpoint-dir "$tmp/ck"
check "cannot be combined with --resume" train --resume --lr 0.1
check "empty.txt" train --model bert-tiny --data "$tmp/empty.txt"
check "binary" train --model bert-tiny --data "$tmp/binary.txt"
check "missing.txt" train --model bert-tiny --data "$tmp/one.txt" --vocab "$tmp/missing.txt"
check "[UNK]" train --model bert-tiny --data "$tmp/one.txt" --vocab "$tmp/vocab.txt"
check "--seq-len 600" train --model bert-tiny --seq-len 600
check "unknown BERT preset" train --model bert-huge
check "is a flag of the BERT trainer" train --seq-len 64
check "not a flag of the BERT trainer" train --model bert-tiny --momentum 0.9
check "unknown model 'resnet7'" bench --models resnet7 --out "$tmp/bench"
check "cuda:3 is not present" bench --devices cpu,cuda:3 --out "$tmp/bench"
check "--batch must be at least 1" bench --batch 0 --out "$tmp/bench"
check "unknown mode 'infer'" bench --modes infer --out "$tmp/bench"
check "unknown dtype 'fp8'" bench --dtypes fp8 --out "$tmp/bench"
check "batch 10000000 does not fit on cpu" bench --models resnet18 --modes eval --batch 10000000 --out "$tmp/bench"
check "needs $tmp/nopython with PyTorch" bench --vs-pytorch --python "$tmp/nopython" --pytorch-script "$tmp/one.txt" --out "$tmp/bench"
check "does not exist" bench --vs-pytorch --pytorch-script "$tmp/none.py" --out "$tmp/bench"
exit $fail

#!/usr/bin/env bash
# The kiln command on bad input: exit status 1 and exactly one line on stderr, never a crash;
# --help is usage on stdout and exit status 0; every checkpoint path it prints exists.
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
for i in $(seq 1 400); do echo "document $i: the quick brown fox $i jumps over the lazy dog number $((i * 7))"; done >"$tmp/corpus.txt"
fixtures=$(cd "$(dirname "$0")/fixtures" && pwd)
fmnist=/usr/share/datasets/fashion-mnist
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
check "--data needs a value, got an empty one" train --data=
# -h as an option's value is that value (a file named -h), not a request for help
check "does not exist" train --data -h
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
check "--vocab-size goes without --vocab" train --model bert-tiny --data "$tmp/one.txt" --vocab "$tmp/vocab.txt" --vocab-size 100
check "no command given"
check "not a safetensors file" eval --checkpoint "$tmp/vocab.txt"
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
# PyTorch's peer always warms up: Kiln's cold first step beside it is refused, not compared.
check "--vs-pytorch needs --warmup 1 or more" bench --vs-pytorch --warmup 0 --out "$tmp/bench"
# Resource exhaustion and hostile values: a clear error naming the flag, never a hang or a kill.
check "--lr expects a finite number, got 'inf'" train --lr inf
check "--lr expects a finite number, got 'nan'" train --model bert-tiny --lr nan
check "--threads 10000 is more than the" train --threads 10000 --max-steps 1
check "--workers must be at most 64, got 100000" train --workers 100000
check "[kiln train --memory-limit] expected a size" train --memory-limit lots
if "$kiln" info | grep -q "^CUDA: .* [1-9][0-9]* device(s) present"; then
  check "[kiln train --gpu-memory-limit] expected a size" train --gpu-memory-limit lots
else
  check "[kiln bench --gpu-memory-limit] there is no GPU to limit" bench --gpu-memory-limit 4G --models bert-tiny
fi
check "is a file; MNIST data is a directory" train --data "$tmp/one.txt"
check "[kiln eval] checkpoint" eval --checkpoint "$fixtures/bert/hf_tiny/model.safetensors"
check "unknown command 'bogus'" bogus
check "unknown command 'bogus'" help bogus
# A flag where a value belongs, a flag given twice, and flags that would change nothing.
check "--checkpoint-dir needs a value, got the flag --no-verify" train --checkpoint-dir --no-verify --resume
check "--checkpoint needs a value, got the flag --help" eval --checkpoint --help
check "--epochs is given twice ('2', then '1')" train --epochs 2 --epochs 1
check "--resume is given twice" train --resume --resume
check "--no-verify goes with --resume" train --no-verify --max-steps 0
check "--python goes with --vs-pytorch" bench --python python3 --out "$tmp/bench"
check "--seq applies to BERT and sdpa" bench --models small_cnn --seq 7 --out "$tmp/bench"
check "--devices must name at least one, got ','" bench --devices , --out "$tmp/bench"
check "--models names 'small_cnn' twice" bench --models small_cnn,small_cnn --out "$tmp/bench"
check "--momentum must be in [0, 1), got 7" train --momentum 7 --max-steps 0
check "--weight-decay must be >= 0, got -1" train --model bert-tiny --weight-decay -1
check "--lr must be positive, got -0.1" train --lr -0.1
check "'0.5' is less than one byte" train --memory-limit 0.5
check "--seed expects an integer from 0 to 18446744073709551615, got '-1'" train --seed -1
check "[kiln info] unknown option --bogus" info --bogus
check "[kiln train] --amp expects bf16, fp16 or off, got 'fp8'" train --amp fp8
check "--amp cannot be combined with --resume" train --resume --amp bf16
if [[ -d $fmnist ]]; then
  check "[kiln train] cannot write checkpoints to /proc/kiln-checkpoints" train --checkpoint-dir /proc/kiln-checkpoints --max-steps 1
  check "[kiln train] cannot write checkpoints to $tmp/one.txt" train --checkpoint-dir "$tmp/one.txt" --max-steps 1
  # A batch larger than the data set is capped (a note on stdout); the memory limit then stops it.
  check "[cpu] out of memory: asked" train --batch-size 99999999 --max-steps 2 --memory-limit 1G --workers 0
fi

# KILN_PROFILE: 1 prints the per-op table at exit, off prints none, anything else is a warning.
out=$(KILN_PROFILE=1 "$kiln" info 2>&1 >/dev/null)
if [[ "$out" != *"per-op profile (KILN_PROFILE=1)"* ]]; then echo "FAIL: KILN_PROFILE=1 printed no profile: $out"; fail=1; fi
out=$(KILN_PROFILE=off "$kiln" info 2>&1 >/dev/null)
if [[ -n "$out" ]]; then echo "FAIL: KILN_PROFILE=off printed: $out"; fail=1; fi
out=$(KILN_PROFILE=yes "$kiln" info 2>&1 >/dev/null)
if [[ "$out" != *"KILN_PROFILE must be 1 (or on) or 0 (or off), got 'yes'"* ]]; then
  echo "FAIL: KILN_PROFILE=yes: $out"; fail=1
fi

# --help: usage on stdout, exit 0, for the command and every subcommand.
for sub in "" train eval bench info; do
  out=$("$kiln" $sub --help 2>&1)
  if [[ $? -ne 0 || "$out" != usage:* ]]; then echo "FAIL: kiln $sub --help -> $out"; fail=1; fi
done

# The checkpoint path printed after --max-steps exists; a killed writer's temporary goes at the next save.
mkdir -p "$tmp/mlm"
printf 'stale' >"$tmp/mlm/.last.safetensors.tmp.999999999.0.1"
out=$("$kiln" train --model bert-tiny --data "$tmp/corpus.txt" --vocab-size 64 --seq-len 16 --batch-size 4 \
      --epochs 1 --max-steps 1 --checkpoint-dir "$tmp/mlm" 2>&1)
if [[ $? -ne 0 || "$out" != *"checkpoint $tmp/mlm/last.safetensors"* || ! -f $tmp/mlm/last.safetensors ]]; then
  echo "FAIL: bert-tiny --max-steps 1 did not write the checkpoint it names: $out"; fail=1
fi
if [[ -e $tmp/mlm/.last.safetensors.tmp.999999999.0.1 ]]; then echo "FAIL: a stale temporary survived the save"; fail=1; fi
# --amp fp16: the gradient scaler's state is in the checkpoint, and --resume takes it (and the mode) back.
out=$("$kiln" train --model bert-tiny --data "$tmp/corpus.txt" --vocab-size 64 --seq-len 16 --batch-size 4 \
      --epochs 1 --max-steps 2 --amp fp16 --checkpoint-dir "$tmp/mlm16" 2>&1)
if [[ $? -ne 0 ]] || ! grep -qa '"scaler.scale"' "$tmp/mlm16/last.safetensors" || ! grep -qa '"amp":"fp16"' "$tmp/mlm16/last.safetensors"; then
  echo "FAIL: --amp fp16 did not checkpoint its scaler: $out"; fail=1
fi
out=$("$kiln" train --model bert-tiny --data "$tmp/corpus.txt" --resume --checkpoint-dir "$tmp/mlm16" --max-steps 3 2>&1)
if [[ $? -ne 0 || "$out" != *"resumed at epoch 1 step 2"* ]]; then echo "FAIL: resuming an --amp fp16 run: $out"; fail=1; fi
# --model with --resume names the checkpoint's model or is an error (it was dropped unseen).
check "--model bert-small is not the checkpoint's model, bert-tiny" train --model bert-small --data "$tmp/corpus.txt" \
  --resume --checkpoint-dir "$tmp/mlm" --max-steps 2
out=$("$kiln" train --model bert-tiny --data "$tmp/corpus.txt" --resume --checkpoint-dir "$tmp/mlm" --max-steps 2 2>&1)
if [[ $? -ne 0 || "$out" != *"resumed at epoch 1 step 1"* || "$out" != *"lr 0.001,"* ]]; then
  echo "FAIL: resuming the --max-steps checkpoint: $out"; fail=1
fi
# Resuming with nothing left to train says so (it said "resumed at epoch ..." and trained nothing).
out=$("$kiln" train --model bert-tiny --data "$tmp/corpus.txt" --resume --checkpoint-dir "$tmp/mlm" --max-steps 1 2>&1)
if [[ $? -ne 0 || "$out" != *"nothing to do: the checkpoint is at step 2, --max-steps 1"* ]]; then
  echo "FAIL: resuming past --max-steps: $out"; fail=1
fi
# Another corpus on --resume is refused (its schedule and batches would change under the run), and
# the checkpoint keeps the corpus's absolute path: kiln eval finds it from another directory.
for i in $(seq 1 900); do echo "another document $i: a slow red fox $i naps under the busy cat"; done >"$tmp/other.txt"
check "the checkpoint was written for" train --resume --checkpoint-dir "$tmp/mlm" --data "$tmp/other.txt" --max-steps 3
(cd "$tmp" && "$kiln" train --model bert-tiny --data corpus.txt --vocab-size 64 --seq-len 16 --batch-size 4 \
  --epochs 1 --max-steps 1 --checkpoint-dir rel >/dev/null 2>&1)
out=$(cd / && "$kiln" eval --checkpoint "$tmp/rel/last.safetensors" 2>&1)
if [[ $? -ne 0 ]]; then echo "FAIL: kiln eval from another directory of a checkpoint trained on a relative --data: $out"; fail=1; fi
exit $fail

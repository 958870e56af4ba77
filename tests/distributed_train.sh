#!/usr/bin/env bash
# mpirun -np 2 kiln train: the CNN job on two processes (per-process batch 64, so the same global
# batch and steps as one process at 128) reaches one process's test accuracy within a point; a
# run stopped by --max-steps and resumed writes the uninterrupted run's checkpoint; resuming
# at another world size is refused; the BERT trainer runs on two processes, and resumes exactly;
# kiln eval takes a two-process checkpoint; a failing rank ends the job with its error. Usage: tests/distributed_train.sh KILN MPIEXEC
set -uo pipefail
kiln=${1:?usage: distributed_train.sh KILN MPIEXEC}
mpiexec=${2:?usage: distributed_train.sh KILN MPIEXEC}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 ASAN_OPTIONS=${ASAN_OPTIONS:-}:detect_leaks=0
two=("$mpiexec" --oversubscribe --bind-to none -np 2 -x OMP_NUM_THREADS=1 -x ASAN_OPTIONS)
fail=0
accuracy() { sed -n 's/^epoch 1: test accuracy \([0-9.]*\)%.*/\1/p' "$1" | tail -1; }

"$kiln" train --epochs 1 --checkpoint-dir "$tmp/one" >"$tmp/one.log" 2>&1 || { echo "FAIL: one process"; cat "$tmp/one.log"; exit 1; }
"${two[@]}" "$kiln" train --epochs 1 --batch-size 64 --checkpoint-dir "$tmp/two" >"$tmp/two.log" 2>&1 ||
  { echo "FAIL: two processes"; cat "$tmp/two.log"; exit 1; }
a1=$(accuracy "$tmp/one.log")
a2=$(accuracy "$tmp/two.log")
echo "one process: $a1%, two processes: $a2%"
if ! awk -v a="$a1" -v b="$a2" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a > 80 && d <= 1.0) }'; then
  echo "FAIL: two processes reached $a2%, one process $a1%"
  fail=1
fi
grep -q "2 processes (batch per process)" "$tmp/two.log" || { echo "FAIL: the first line does not name the processes"; fail=1; }
[[ $(grep -c "^kiln train:" "$tmp/two.log") == 1 ]] || { echo "FAIL: more than rank 0 printed"; fail=1; }

# stop_and_resume NAME STOP END ARGS...: kiln train ARGS on two processes to step END, and again
# to STOP and then --resume (the checkpoint sets everything else) to END: the resumed run's
# checkpoint must be the uninterrupted run's, byte for byte (weights, optimizer state, data order).
stop_and_resume() {
  local name=$1 stop=$2 end=$3
  shift 3
  "${two[@]}" "$kiln" train "$@" --max-steps "$end" --checkpoint-dir "$tmp/$name-ref" >"$tmp/$name-ref.log" 2>&1 ||
    { echo "FAIL: $name's uninterrupted run to step $end"; cat "$tmp/$name-ref.log"; fail=1; }
  "${two[@]}" "$kiln" train "$@" --max-steps "$stop" --checkpoint-dir "$tmp/$name" >"$tmp/$name-1.log" 2>&1 ||
    { echo "FAIL: $name's run to resume"; cat "$tmp/$name-1.log"; fail=1; }
  "${two[@]}" "$kiln" train --resume --max-steps "$end" --checkpoint-dir "$tmp/$name" >"$tmp/$name-2.log" 2>&1 ||
    { echo "FAIL: $name's resumed run"; cat "$tmp/$name-2.log"; fail=1; }
  if cmp -s "$tmp/$name-ref/last.safetensors" "$tmp/$name/last.safetensors"; then
    echo "$name stopped at step $stop and resumed to $end: the uninterrupted run's checkpoint, byte for byte"
  else
    echo "FAIL: $name's checkpoint resumed to step $end differs from the uninterrupted run's"
    fail=1
  fi
}

# The CNN stopped mid-epoch and resumed.
stop_and_resume cnn 30 60 --epochs 1 --batch-size 64
grep -q "resumed at epoch 1 step 30" "$tmp/cnn-2.log" || { echo "FAIL: no resume banner"; cat "$tmp/cnn-2.log"; fail=1; }

# Another world size cannot continue the same data order.
err=$("$kiln" train --resume --checkpoint-dir "$tmp/cnn" 2>&1 >/dev/null)
if [[ $? != 1 || $err != *"was written by a job of 2 process(es); resume it with as many (this job has 1)"* ]]; then
  echo "FAIL: resuming at world size 1: $err"
  fail=1
fi

# The BERT trainer on two processes.
for i in $(seq 1 300); do echo "document $i: the quick brown fox $i jumps over the lazy dog number $((i * 7))"; done >"$tmp/corpus.txt"
"${two[@]}" "$kiln" train --model bert-tiny --data "$tmp/corpus.txt" --max-steps 6 --eval-every 3 --checkpoint-dir "$tmp/bert6" \
  >"$tmp/bert.log" 2>&1 || { echo "FAIL: BERT on two processes"; cat "$tmp/bert.log"; fail=1; }
[[ $(grep -c "^step 3: held-out loss" "$tmp/bert.log") == 1 && -f $tmp/bert6/last.safetensors ]] ||
  { echo "FAIL: BERT's evaluation or checkpoint"; cat "$tmp/bert.log"; fail=1; }

# BERT stopped and resumed on two processes, without --model or --data (the checkpoint has them):
# the uninterrupted run's checkpoint, byte for byte. The documents (blank-line separated) differ in
# length, so the two processes' batches do: each masks by the batch's index in the run, where a
# running offset, advanced by each batch's longest sequence and saved by rank 0 alone, differed.
for i in $(seq 1 200); do printf 'document %d: %s the end\n\n' "$i" "$(seq -s ' ' 1 $((i % 23)))"; done >"$tmp/ragged.txt"
stop_and_resume bert 3 9 --model bert-tiny --data "$tmp/ragged.txt" --vocab-size 200 --seq-len 32 --batch-size 4 \
  --epochs 1 --eval-every 3
# kiln eval of a two-process checkpoint (the weights alone; one process).
"$kiln" eval --checkpoint "$tmp/bert-ref/last.safetensors" >"$tmp/beval.log" 2>&1 && grep -q "^held-out loss" "$tmp/beval.log" ||
  { echo "FAIL: kiln eval of a two-process BERT checkpoint"; cat "$tmp/beval.log"; fail=1; }

# A rank that fails (rank 1 cannot read its data: a directory only it is given) ends the job, with its
# error once and a non-zero status, well within 30 seconds. The rank picks its arguments itself, not
# through mpiexec's "-np 1 A : -np 1 B" form, on which Open MPI 5.0.7's mpiexec (Debian 13) crashes.
cat >"$tmp/rank1-fails.sh" <<EOF
#!/bin/sh
rank=\${OMPI_COMM_WORLD_RANK:-\${PMI_RANK:-0}}
if [ "\$rank" = 1 ]; then
  exec "$kiln" train --checkpoint-dir "$tmp/f" --max-steps 5 --data "$tmp/nothing-here"
fi
exec "$kiln" train --checkpoint-dir "$tmp/f" --max-steps 5
EOF
chmod +x "$tmp/rank1-fails.sh"
start=$SECONDS
"$mpiexec" --oversubscribe --bind-to none -x ASAN_OPTIONS -np 2 "$tmp/rank1-fails.sh" >"$tmp/fail.log" 2>&1
rc=$?
if [[ $rc == 0 || $((SECONDS - start)) -gt 30 || $(grep -c "^\[distributed\] rank 1 failed: " "$tmp/fail.log") != 1 ]]; then
  echo "FAIL: a failing rank (exit $rc after $((SECONDS - start)) s):"
  cat "$tmp/fail.log"
  fail=1
fi

[[ $fail == 0 ]] && echo "distributed training: all checks passed"
exit $fail

#!/bin/bash
# The Python front end's speed (docs/BENCHMARKS.md, "Python front end"): tests/python_bench.py
# under torchrun on 2 CPU ranks, through zerotrain and through DeepSpeed 0.19.8 (its own CPU Adam
# op, as a DeepSpeed user gets it), and //trainer:main on the same GPT-2 shape (model "gpt2",
# GELU tanh, no dropout) and config, for each stage and precision, ROUNDS times in alternating
# order; prints the medians as a table.
#
# Usage: bazel run //tests/python:python_bench -- [ROUNDS] [STAGES] [PRECISIONS]
#        (defaults: 2, "0 1 2 3", "fp32 bf16")
set -euo pipefail
WHEEL=$(realpath "$1")
VENV_BIN=$(realpath "$2/../../../../bin")
ORACLE_DIR=$(dirname "$(realpath "$3")")
TRAINER=$(realpath "$4")
ROUNDS=${5:-2}
STAGES=${6:-0 1 2 3}
PRECISIONS=${7:-fp32 bf16}
TESTS=$(dirname "$(realpath "$0")")
[ -f "$TESTS/python_bench.py" ] || TESTS="$RUNFILES_DIR/$TEST_WORKSPACE/tests/python"
[ -f "$TESTS/python_bench.py" ] || TESTS="$(realpath "$0").runfiles/__main__/tests/python"
WORK=$(mktemp -d /tmp/python_bench.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
unset RANK WORLD_SIZE LOCAL_RANK MASTER_ADDR MASTER_PORT
export OMP_NUM_THREADS=1
"$VENV_BIN/pip" install -q --no-deps --no-index --disable-pip-version-check --target "$WORK/site" \
  "$WHEEL"
RESULTS="$WORK/results.jsonl"

python_run() {  # engine stage precision
  local path="$WORK/site"
  [ "$1" = deepspeed ] && path="$WORK/site:$ORACLE_DIR"
  PYTHONPATH="$path" "$VENV_BIN/torchrun" --standalone --nproc_per_node=2 \
    "$TESTS/python_bench.py" --engine "$1" --stage "$2" --precision "$3" --out "$RESULTS" \
    >"$WORK/run.log" 2>&1 || { tail -n 20 "$WORK/run.log"; exit 1; }
}

trainer_run() {  # stage precision
  local bf16=false
  [ "$2" = bf16 ] && bf16=true
  cat >"$WORK/run.pbtxt" <<PBTXT
train_micro_batch_size_per_gpu: 8
gradient_accumulation_steps: 1
gradient_clipping: 1.0
zero_optimization { stage: $1 }
bf16 { enabled: $bf16 }
optimizer { type: "AdamW" params { lr: 1e-3 weight_decay: 0.1 } }
model { name: "gpt2" vocab_size: 256 block_size: 128 n_layer: 4 n_head: 6 n_embd: 384
        dropout: 0 gelu_tanh: true }
data { source: "embedded" eval_fraction: 0 }
run { steps: 13 output_dir: "$WORK/trainer" sample_tokens: 0 }
PBTXT
  rm -rf "$WORK/trainer"
  "$TRAINER" --config="$WORK/run.pbtxt" >"$WORK/trainer.log" 2>&1 ||
    { tail -n 20 "$WORK/trainer.log"; exit 1; }
  local per_rank
  per_rank=$(sed -n 's/^ *\([0-9.]*\) samples\/s .* per rank, mean.*/\1/p' "$WORK/trainer.log")
  [ -n "$per_rank" ] || { tail -n 5 "$WORK/trainer.log"; exit 1; }
  python3 -c 'import json, sys
print(json.dumps({"engine": "trainer", "stage": int(sys.argv[1]), "precision": sys.argv[2],
                  "samples_per_s": 2 * float(sys.argv[3])}))' "$1" "$2" "$per_rank" |
    tee -a "$RESULTS"
}

for round in $(seq "$ROUNDS"); do
  for stage in $STAGES; do
    for precision in $PRECISIONS; do
      order="zerotrain deepspeed trainer"
      [ $((round % 2)) -eq 0 ] && order="trainer deepspeed zerotrain"
      for engine in $order; do
        if [ "$engine" = trainer ]; then trainer_run "$stage" "$precision"; else
          python_run "$engine" "$stage" "$precision"
          tail -n 1 "$RESULTS"
        fi
      done
    done
  done
done

python3 - "$RESULTS" <<'PY'
import collections, json, statistics, sys
runs = collections.defaultdict(list)
binding = collections.defaultdict(list)
for line in open(sys.argv[1]):
    r = json.loads(line)
    runs[(r["stage"], r["precision"], r["engine"])].append(r["samples_per_s"])
    if "binding_ms_per_step" in r:
        binding[(r["stage"], r["precision"])].append((r["binding_ms_per_step"], r["ms_per_step"]))
print("| stage | precision | zerotrain (Python) samples/s | DeepSpeed samples/s "
      "| zerotrain / DeepSpeed | //trainer:main samples/s | Python / trainer "
      "| binding ms/step (of ms/step) |")
print("|---|---|---|---|---|---|---|---|")
cases = sorted({(s, p) for s, p, _ in runs}, key=lambda k: (k[0], k[1] != "fp32"))
for stage, precision in cases:
    zt, ds, tr = (statistics.median(runs[(stage, precision, e)])
                  for e in ("zerotrain", "deepspeed", "trainer"))
    b = binding[(stage, precision)]
    b_ms, step_ms = statistics.median(x for x, _ in b), statistics.median(y for _, y in b)
    print(f"| {stage} | {precision} | {zt:.1f} | {ds:.1f} | {zt / ds:.2f}x | {tr:.1f} | "
          f"{zt / tr:.2f} | {b_ms:.2f} ({step_ms:.0f}) |")
PY

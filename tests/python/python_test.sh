#!/bin/bash
# The Python front end as its users get it: //python:wheel installed by the project venv's pip,
# then scripts that `import zerotrain as deepspeed`: bad input raising what it names (bad configs
# as //trainer:main words them), a torch of another version refused at import, Ctrl-C
# mid-training (KeyboardInterrupt, the newest checkpoint loads), zero.Init's peak RSS per rank
# (tests/zero_init_memory.py), tests/train_parity.py (stages 0-3 against a plain
# torch.optim.AdamW loop, resume bitwise) under the real torchrun and then on DeepSpeed 0.19.8
# (the losses compared), transformers' models built under zero.Init on both engines
# (tests/zero_init_hf.py), tests/config_paths.py (bf16, fp16, Muon, offload, a schedule) on both
# engines, and GPT2LMHeadModel and LlamaForCausalLM at stage 3 under DeepSpeed's launcher.
#
# Two targets (tests/python/BUILD) run it, each a part, so that neither ends the test phase alone:
#   //tests/python:python_test        basics (bad input, another torch, Ctrl-C) and parity (torchrun,
#                                     zero.Init's memory, then DeepSpeed on the same script);
#   //tests/python:python_paths_test  paths (config_paths.py, with zero_init_hf.py, on both
#                                     engines) and the DeepSpeed launcher.
#
# Usage: python_test.sh <basics,parity|paths> <the wheel> <the venv's torch/ folder>
#        <tests/deepspeed/ds_oracle.py> <//trainer:main>
set -euo pipefail
say() { echo "python_test: $*"; }
fail() {
  say "FAIL: $*"
  exit 1
}
PARTS=",$1,"
WHEEL=$(realpath "$2")
VENV_BIN=$(realpath "$3/../../../../bin")
ORACLE_DIR=$(dirname "$(realpath "$4")")
TRAINER=$(realpath "$5")
part() { [[ "$PARTS" == *",$1,"* ]]; }
TESTS=$(dirname "$(realpath "$0")")
[ -f "$TESTS/train_parity.py" ] || TESTS="$TEST_SRCDIR/$TEST_WORKSPACE/tests/python"
WORK=$(mktemp -d "${TEST_TMPDIR:-/tmp}/python.XXXXXX")
unset RANK WORLD_SIZE LOCAL_RANK MASTER_ADDR MASTER_PORT
export OMP_NUM_THREADS=1 DEEPSPEED_TIMEOUT=2
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

"$VENV_BIN/pip" install -q --no-deps --no-index --disable-pip-version-check --target "$WORK/site" \
  "$WHEEL" || fail "pip install $WHEEL"
export PYTHONPATH="$WORK/site"
cd "$WORK"

part_basics() {
  mkdir -p "$WORK/bad"
  "$VENV_BIN/python" "$TESTS/bad_input.py" "$TRAINER" "$WORK/bad" >bad_input.log 2>&1 ||
    fail "bad_input.py: $(tail -n 8 bad_input.log)"
  say "$(tail -n 1 bad_input.log)"

  # Another torch than the one the extension was built against: one line naming both.
  cp -r "$WORK/site" "$WORK/other"
  sed -i 's/^TORCH_VERSION = .*/TORCH_VERSION = "0.0.1"/' "$WORK/other/zerotrain/_build_info.py"
  if PYTHONPATH="$WORK/other" "$VENV_BIN/python" -c 'import zerotrain' >other.log 2>&1; then
    fail "import zerotrain built for torch 0.0.1 succeeded"
  fi
  grep -q "ImportError: zerotrain .* was built against torch 0.0.1, but this Python has torch 2" \
    other.log || fail "another torch: $(tail -n 3 other.log)"
  say "another torch: refused at import"

  # Ctrl-C while the engine works: KeyboardInterrupt, and the newest checkpoint loads.
  "$VENV_BIN/python" "$TESTS/interrupt.py" train "$WORK/int" >interrupt.log 2>&1 &
  pid=$!
  for _ in $(seq 600); do
    grep -q '^saved 3$' interrupt.log && break
    kill -0 "$pid" 2>/dev/null || fail "interrupt.py train ended: $(tail -n 8 interrupt.log)"
    sleep 0.05
  done
  kill -INT "$pid"
  rc=0
  wait "$pid" || rc=$?
  [ "$rc" -ne 0 ] || fail "interrupt.py train exited 0 after SIGINT"
  grep -q '^KeyboardInterrupt' interrupt.log || fail "no KeyboardInterrupt: $(tail -n 8 interrupt.log)"
  "$VENV_BIN/python" "$TESTS/interrupt.py" resume "$WORK/int" >resume.log 2>&1 ||
    fail "resume after Ctrl-C: $(tail -n 8 resume.log)"
  say "Ctrl-C: KeyboardInterrupt; $(tail -n 1 resume.log)"
}

part_parity() {
  "$VENV_BIN/torchrun" --standalone --nproc_per_node=2 "$TESTS/train_parity.py" --out "$WORK/tr" \
    >torchrun.log 2>&1 || fail "torchrun: $(tail -n 20 torchrun.log)"
  grep -q '^train_parity: OK' torchrun.log || fail "torchrun: no OK: $(tail -n 8 torchrun.log)"
  say "torchrun, stages 0-3: $(grep -c 'matches torch AdamW' torchrun.log) of 4 match"
  # comms_logger.verbose with prof_ops all_reduce, all_gather: a line per op of those, no other.
  grep -q '^comm op: all_gather ' torchrun.log || fail "comms_logger.verbose printed no all_gather"
  ! grep '^comm op: ' torchrun.log | grep -qv '^comm op: all_\(reduce\|gather\) ' ||
    fail "comms_logger.verbose printed an op prof_ops leaves out"

  # zero.Init in bytes: each rank's peak RSS while the model is built, about 1/world of it.
  "$VENV_BIN/torchrun" --standalone --nproc_per_node=2 "$TESTS/zero_init_memory.py" \
    >zero_init_memory.log 2>&1 || fail "zero_init_memory.py: $(tail -n 20 zero_init_memory.log)"
  grep -q '^zero_init_memory: OK' zero_init_memory.log ||
    fail "zero_init_memory: no OK: $(tail -n 8 zero_init_memory.log)"
  say "$(grep 'rank 0:' zero_init_memory.log)"

  # The same script on DeepSpeed itself: the same per-step losses, stage by stage.
  PYTHONPATH="$ORACLE_DIR" "$VENV_BIN/torchrun" --standalone --nproc_per_node=2 \
    "$TESTS/train_parity.py" --engine deepspeed --out "$WORK/oracle" >oracle.log 2>&1 ||
    fail "the script on DeepSpeed: $(tail -n 20 oracle.log)"
  "$VENV_BIN/python" - "$WORK/tr/losses_rank0.json" "$WORK/oracle/losses_rank0.json" <<'EOF' ||
import json, sys
got, want = (json.load(open(p)) for p in sys.argv[1:])
assert got.keys() == want.keys(), (got.keys(), want.keys())
for case in want:
    assert len(got[case]) == len(want[case]), case
    for i, (g, w) in enumerate(zip(got[case], want[case])):
        assert abs(g - w) <= 1e-5 * abs(w), f"{case}, micro-step {i}: {g} against {w}"
EOF
    fail "losses differ from DeepSpeed's"
  say "DeepSpeed 0.19.8 on the same script: per-step losses equal within 1e-5, stages 0-3"
}

part_paths() {
  # bf16, fp16, CPU offload, an LR schedule (and NVMe, against no offload): zerotrain against DeepSpeed.
  mkdir -p "$WORK/paths" "$WORK/paths_oracle"
  "$VENV_BIN/torchrun" --standalone --nproc_per_node=2 "$TESTS/config_paths.py" \
    --out "$WORK/paths" >paths.log 2>&1 || fail "config_paths.py: $(tail -n 20 paths.log)"
  PYTHONPATH="$ORACLE_DIR" "$VENV_BIN/torchrun" --standalone --nproc_per_node=2 \
    "$TESTS/config_paths.py" --engine deepspeed --out "$WORK/paths_oracle" >paths_oracle.log 2>&1 ||
    fail "config_paths.py on DeepSpeed: $(tail -n 20 paths_oracle.log)"
  "$VENV_BIN/python" - "$WORK/paths/paths_rank0.json" "$WORK/paths_oracle/paths_rank0.json" \
    >paths_compare.log 2>&1 <<'EOF' || fail "config paths differ from DeepSpeed's: $(tail -n 3 paths_compare.log)"
import json, sys
got, want = (json.load(open(p)) for p in sys.argv[1:])
assert got.keys() == want.keys(), (got.keys(), want.keys())
for name in want:
    bound = 1e-2 if name.startswith("bf16") else 1e-5
    g, w = got[name], want[name]
    assert len(g["losses"]) == len(w["losses"]), name
    worst = max(abs(a - b) / abs(b) for a, b in zip(g["losses"], w["losses"]))
    assert worst <= bound, f"{name}: losses differ by up to {worst:.2e} (bound {bound})"
    assert g["scales"] == w["scales"] and g["skipped"] == w["skipped"], \
        f"{name}: loss scales {g['scales']} ({g['skipped']} skipped) against {w['scales']} ({w['skipped']})"
    for a, b in zip(g["lrs"], w["lrs"]):
        assert abs(a - b) <= 1e-9 * abs(b) + 1e-15, f"{name}: lr {a} against {b}"
    print(f"{name}: largest relative loss difference {worst:.1e}, {g['skipped']} skipped")
EOF
  say "bf16, fp16, Muon, CPU offload, WarmupLR against DeepSpeed; NVMe bitwise: $(paste -sd';' paths_compare.log)"

  # transformers' models built under zero.Init: the parameters DeepSpeed's zero.Init leaves.
  # (config_paths.py built them after its cases, on both engines: zero_init_hf.py)
  "$VENV_BIN/python" - "$WORK/paths/zero_init_hf_rank0.pt" \
    "$WORK/paths_oracle/zero_init_hf_rank0.pt" >hf_init_compare.log 2>&1 <<'EOF' ||
import sys, torch
got, want = (torch.load(p) for p in sys.argv[1:])
assert got.keys() == want.keys(), (got.keys(), want.keys())
for name in want:
    g, w = got[name], want[name]
    assert g["params"].keys() == w["params"].keys(), name
    for p in w["params"]:
        assert torch.equal(g["params"][p], w["params"][p]), f"{name}: {p} differs from DeepSpeed's"
    assert abs(g["loss"] - w["loss"]) <= 1e-6 * abs(w["loss"]), (name, g["loss"], w["loss"])
    print(f"{name} {len(w['params'])} parameters bitwise")
EOF
    fail "zero.Init with transformers differs from DeepSpeed's: $(tail -n 3 hf_init_compare.log)"
  say "GPT-2 and Llama built under zero.Init as DeepSpeed's: $(paste -sd';' hf_init_compare.log)"

  "$VENV_BIN/deepspeed" --num_gpus=2 --master_port="$(free_port)" "$TESTS/train_parity.py" \
    --stages 3 --model gpt2,llama --out "$WORK/ds" >deepspeed.log 2>&1 ||
    fail "deepspeed launcher: $(tail -n 20 deepspeed.log)"
  grep -q 'train_parity: OK' deepspeed.log || fail "deepspeed: no OK: $(tail -n 8 deepspeed.log)"
  say "deepspeed launcher, GPT2LMHeadModel and LlamaForCausalLM at stage 3: match torch AdamW, resume bitwise"
  # Its stage 3 checkpoint on one rank at stage 0: the same loss on the probe batch.
  "$VENV_BIN/python" "$TESTS/reload_one_rank.py" "$WORK/ds/gpt2_stage3" >reload.log 2>&1 ||
    fail "reload on one rank: $(tail -n 8 reload.log)"
  say "$(tail -n 1 reload.log)"
}

ran=0
for p in basics parity paths; do
  if part "$p"; then
    "part_$p"
    ran=1
  fi
done
[ "$ran" -eq 1 ] || fail "no part named in '$1' (basics, parity, paths)"
say "PASSED"

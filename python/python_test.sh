#!/bin/bash
# The Python front end as its users get it: //python:wheel installed by the project venv's pip,
# then scripts that `import zerotrain as deepspeed`: bad input raising what it names, a torch of
# another version refused at import, Ctrl-C mid-training (KeyboardInterrupt, the newest
# checkpoint loads), and tests/train_parity.py (stages 0-3 against a plain
# torch.optim.AdamW loop, resume bitwise) under the real torchrun and DeepSpeed's launcher, with a
# Hugging Face GPT2LMHeadModel at stage 3.
#
# Usage: python_test.sh <the wheel> <the venv's torch/ folder>
set -euo pipefail
say() { echo "python_test: $*"; }
fail() {
  say "FAIL: $*"
  exit 1
}
WHEEL=$(realpath "$1")
VENV_BIN=$(realpath "$2/../../../../bin")
TESTS=$(dirname "$(realpath "$0")")/tests
[ -f "$TESTS/train_parity.py" ] || TESTS="$TEST_SRCDIR/$TEST_WORKSPACE/python/tests"
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

"$VENV_BIN/python" "$TESTS/bad_input.py" >bad_input.log 2>&1 ||
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

"$VENV_BIN/torchrun" --standalone --nproc_per_node=2 "$TESTS/train_parity.py" --out "$WORK/tr" \
  >torchrun.log 2>&1 || fail "torchrun: $(tail -n 20 torchrun.log)"
grep -q '^train_parity: OK' torchrun.log || fail "torchrun: no OK: $(tail -n 8 torchrun.log)"
say "torchrun, stages 0-3: $(grep -c 'matches torch AdamW' torchrun.log) of 4 match"

"$VENV_BIN/deepspeed" --num_gpus=2 --master_port="$(free_port)" "$TESTS/train_parity.py" \
  --stages 3 --model gpt2 --out "$WORK/ds" >deepspeed.log 2>&1 ||
  fail "deepspeed launcher: $(tail -n 20 deepspeed.log)"
grep -q 'train_parity: OK' deepspeed.log || fail "deepspeed: no OK: $(tail -n 8 deepspeed.log)"
say "deepspeed launcher, GPT2LMHeadModel at stage 3: matches torch AdamW, resume bitwise"
say "PASSED"

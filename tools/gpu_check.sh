#!/usr/bin/env bash
# Runs zerotrain's GPU tests on a machine with a GPU and a torch 2.11 install but no Bazel (e.g.
# the accelerator machine a session may be lent). Build and stage here, run there:
#   here:  bash tools/gpu_check.sh stage     # bazel build --config=cuda, copies tests into .gpu/
#   there: bash tools/gpu_check.sh run       # with .gpu/ carried along; prints each test's result
# With the device tool: run(command="bash tools/gpu_check.sh run", carry=[".gpu"]).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
TESTS=(//comm:nccl_backend_test //optim:fused_adam_cuda_test)

case "${1:-}" in
  stage)
    # Our own libraries linked in statically, so the binaries need only LibTorch and CUDA there.
    bazel build --config=cuda --dynamic_mode=off "${TESTS[@]}"
    rm -rf .gpu && mkdir -p .gpu
    for t in "${TESTS[@]}"; do
      path="bazel-bin/$(echo "${t#//}" | tr ':' '/')"
      cp "$path" .gpu/
    done
    # Debian's Abseil, which that machine does not have.
    mkdir -p .gpu/lib
    ldd .gpu/*_test | awk '/libabsl_/ {print $3}' | sort -u | xargs -r cp -L -t .gpu/lib
    du -sh .gpu
    ;;
  run)
    # LibTorch and the CUDA/NCCL libraries from that machine's torch wheel; our binaries' own
    # RUNPATH (this checkout's .venv, /usr/local/cuda) may not exist there.
    site=$(python3 -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))')
    export LD_LIBRARY_PATH="$PWD/.gpu/lib:$site/torch/lib:$site/nvidia/cu13/lib:$site/nvidia/nccl/lib:${LD_LIBRARY_PATH:-}"
    python3 -c 'import torch; print("gpu_check: torch", torch.__version__, "devices", torch.cuda.device_count())'
    failed=0
    for t in .gpu/*_test; do
      echo "gpu_check: $t"
      "$t" --gtest_brief=0 || failed=1
    done
    exit "$failed"
    ;;
  *)
    echo "usage: tools/gpu_check.sh stage|run" >&2
    exit 2
    ;;
esac

#!/usr/bin/env bash
# Runs zerotrain's GPU checks on a machine that has GPUs and torch 2.11 (cu130) in its python3 but
# no Bazel, no network and none of Debian's Abseil/glog/gflags/protobuf/gtest (e.g. the
# accelerator machine a session may be lent). Build and stage here, run there:
#   here:  bash tools/gpu_check.sh stage   # --config=cuda build; binaries, libraries, data -> .gpu/
#   there: bash tools/gpu_check.sh run     # one PASS/FAIL/SKIP line per check, then a total
# With the device tool: run(command="bash tools/gpu_check.sh run", carry=[".gpu"]).
# docs/ENGINE.md, "Running on a GPU machine".
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# The checks, one per line: a name, the Bazel target of its binary, then the binary's arguments
# (word-split; paths are relative to .gpu/, where data files keep their repository paths). A new
# check is one more line; `stage` builds and copies every target listed here. For example:
#   "engine_cuda        //engine:engine_cuda_test"    (in the list below)
#   "trainer_cuda       //trainer:main --config=trainer/configs/cuda.pbtxt --nproc_per_node=1"
# (the binary's own flags, no "--" as after `bazel run`; a config outside trainer/configs also
# goes under DATA below). A target "python:FILE" is a script run by the machine's python3 with the
# staged Python package (zerotrain, its extension built here) on PYTHONPATH; FILE goes under DATA.
CHECKS=(
  "pinned_host_pool   //offload:pinned_host_pool_test"
  "nccl_backend       //comm:nccl_backend_test"
  "fused_adam_cuda    //optim:fused_adam_cuda_test"
  "device_runtime     //engine:device_runtime_test"
  "recompute_cuda     //recompute:activation_checkpoint_cuda_test"
  "checkpoint_rng     //engine:engine_checkpoint_test --gtest_filter=CheckpointRng.*"
  "engine_cuda        //engine:engine_cuda_test"
  "engine_cuda_offload //engine:engine_cuda_offload_test"
  "trainer_cuda       //trainer:main_cuda_test bin/trainer/main"
  "python_cuda        python:tests/python/cuda_train.py"
)
# Built and staged although no check runs them yet.
EXTRA_TARGETS=(//trainer:main //python:_C.so)
# Files and folders the checks read, copied to the same relative paths under .gpu/ (the GPU
# benchmark, tools/gpu_bench.sh, is staged with them and uses //trainer:main).
DATA=(trainer/configs tools/gpu_bench.sh tools/gpu_bench_peer.py tests/python/cuda_train.py)

# Limits on the GPU machine: each check, and the whole run (the device tool's budget is short).
CHECK_TIMEOUT_S=${GPU_CHECK_TIMEOUT_S:-150}
BUDGET_S=${GPU_CHECK_BUDGET_S:-240}

# Libraries every Linux system has and that must come from it (glibc, the compiler's runtime),
# and the NVIDIA driver's, which only a GPU machine has.
SYSTEM_LIBS=" linux-vdso.so.1 ld-linux-x86-64.so.2 libc.so.6 libm.so.6 libmvec.so.1 libpthread.so.0 \
libdl.so.2 librt.so.1 libutil.so.1 libresolv.so.2 libstdc++.so.6 libgcc_s.so.1 libcuda.so.1 \
libnvidia-ml.so.1 "

# .gpu/ next to this script when it was copied there, else the checkout's.
if [ -d "$(dirname "${BASH_SOURCE[0]}")/bin" ]; then
  gpu="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
else
  gpu="$root/.gpu"
fi

die() { echo "gpu_check: $*" >&2; exit 2; }
is_system_lib() { [[ "$SYSTEM_LIBS" == *" $1 "* ]]; }
# //pkg/sub:name -> pkg/sub/name (bazel-bin and .gpu/bin use the same layout).
target_path() { local t="${1#//}"; echo "${t/://}"; }

# Every library the binaries need as "name path" (path "not" when ldd finds none), once each.
needed_libs() {
  ldd "$@" 2>/dev/null | awk '$2 == "=>" { print $1, ($3 == "not" ? "not" : $3) }' | sort -u
}

# The torch wheel's library folders: torch/lib and nvidia/*/lib next to it.
wheel_dirs() {
  local torch_lib="$1" d
  echo "$torch_lib"
  for d in "$torch_lib"/../../nvidia/*/lib; do [ -d "$d" ] && (cd "$d" && pwd); done
  return 0
}

# Fails naming each library a staged binary would not find on a machine that has only the
# system libraries, .gpu/lib and the wheel folders in $1 (colon-separated).
check_libs() {
  local search="$1"; shift
  local bad=0 name path
  local dirs=() d
  # Canonical folders: LibTorch's own RPATH ($ORIGIN/../../nvidia/...) names the same ones.
  for d in ${search//:/ }; do dirs+=("$(readlink -f "$d")"); done
  while read -r name path; do
    is_system_lib "$name" && continue
    local found=0 dir
    dir=$(readlink -f "$(dirname "$path")")
    for d in "${dirs[@]}"; do [ "$dir" = "$d" ] && found=1; done
    [ "$found" = 1 ] && continue
    echo "gpu_check: $name resolves to $path, neither in .gpu/lib nor in the torch wheel" >&2
    bad=1
  done < <(LD_LIBRARY_PATH="$search" needed_libs "$@")
  return "$bad"
}

stage() {
  cd "$root"
  local targets=() line name target
  for line in "${CHECKS[@]}"; do
    read -r name target _ <<<"$line"
    [[ "$target" == python:* ]] && continue
    [[ " ${targets[*]-} " == *" $target "* ]] || targets+=("$target")
  done
  targets+=("${EXTRA_TARGETS[@]}")
  # Our own libraries linked in statically, so the binaries need only shared libraries that are
  # not ours: LibTorch, CUDA and Debian's (copied below).
  bazel build --config=cuda --dynamic_mode=off "${targets[@]}" //python:build_info
  local home
  home=$(sed -n 's/^LIBTORCH_HOME = ["'"'"']\(.*\)["'"'"']$/\1/p' \
    "$(bazel info output_base)/external/libtorch/version.bzl")
  if [ -z "$home" ] || [ ! -e "$home/lib/libtorch_cpu.so" ]; then
    die "cannot find the LibTorch the build used (got '$home')"
  fi
  local wheel
  wheel=$(wheel_dirs "$home/lib" | paste -sd:)

  rm -rf "$gpu"
  mkdir -p "$gpu/bin" "$gpu/lib"
  local bins=() t
  for t in "${targets[@]}"; do
    local rel
    rel=$(target_path "$t")
    mkdir -p "$gpu/bin/$(dirname "$rel")"
    # Debug info is most of a binary's size and the device tool carries at most 64 MiB.
    objcopy --strip-debug "bazel-bin/$rel" "$gpu/bin/$rel"
    bins+=("$gpu/bin/$rel")
  done

  # Debian's Abseil, glog, gflags, protobuf, gtest, ... : whatever ldd resolves outside the system
  # libraries and the wheel (which the GPU machine has), dereferenced to the name the loader asks
  # for. The libcudart and libnccl we linked against in /usr/local/cuda are in the wheel too.
  local name path missing=0
  while read -r name path; do
    is_system_lib "$name" && continue
    if [ "$path" = not ]; then
      echo "gpu_check: $name: not found here" >&2
      missing=1
      continue
    fi
    local in_wheel=0 d
    IFS=: read -ra dirs <<<"$wheel"
    for d in "${dirs[@]}"; do [ -e "$d/$name" ] && in_wheel=1; done
    [ "$in_wheel" = 1 ] && continue
    cp -L "$path" "$gpu/lib/$name"
  done < <(needed_libs "${bins[@]}")
  [ "$missing" = 0 ] || die "some libraries are missing on this machine"

  # The Python package as the wheel lays it out, with the extension built above.
  mkdir -p "$gpu/python/zerotrain"
  cp python/zerotrain/*.py bazel-bin/python/zerotrain/_build_info.py "$gpu/python/zerotrain/"
  cp "$gpu/bin/python/_C.so" "$gpu/python/zerotrain/_C.so"

  local d
  for d in "${DATA[@]}"; do
    mkdir -p "$gpu/$(dirname "$d")"
    cp -RL "$d" "$gpu/$d"
  done
  cp "$root/tools/gpu_check.sh" "$gpu/gpu_check.sh"
  printf '%s\n' "${CHECKS[@]}" >"$gpu/checks.txt"

  check_libs "$gpu/lib:$wheel" "${bins[@]}" || die "staged binaries would miss libraries"
  # What the GPU machine's own glibc and libstdc++ must provide (they are not copied).
  local need
  need=$(objdump -T "${bins[@]}" "$gpu"/lib/* 2>/dev/null |
    grep -o 'GLIBC\(XX\)\?_[0-9.]*' | sort -u -V | awk -F_ '{ v[$1] = $0 } END { print v["GLIBC"], v["GLIBCXX"] }')
  echo "gpu_check: the GPU machine needs at least $need"
  echo "gpu_check: staged $(find "$gpu/lib" -type f | wc -l) libraries and ${#bins[@]} binaries:"
  du -sh "$gpu"
}

# On the GPU machine: LibTorch, CUDA and NCCL from its torch wheel, our other libraries from
# .gpu/lib. The binaries' own RUNPATH (this checkout's .venv, /usr/local/cuda) is looked at only
# after LD_LIBRARY_PATH and need not exist there. tools/gpu_bench.sh uses it too.
use_staged_libs() {
  [ -d "$gpu/bin" ] || die "$gpu/bin is missing: run 'bash tools/gpu_check.sh stage' first (here)"
  local site
  site=$(python3 -W ignore -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))') ||
    die "python3 cannot import torch"
  local wheel
  wheel=$(wheel_dirs "$site/torch/lib" | paste -sd:)
  export LD_LIBRARY_PATH="$gpu/lib:$wheel${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
}

run() {
  use_staged_libs
  python3 -W ignore -c 'import torch; print("gpu_check: torch", torch.__version__, "CUDA",
torch.version.cuda, "devices", torch.cuda.device_count())'
  local bins=()
  mapfile -t bins < <(find "$gpu/bin" -type f)
  check_libs "$LD_LIBRARY_PATH" "${bins[@]}" ||
    echo "gpu_check: warning: libraries resolve outside .gpu/lib and the wheel (above)" >&2

  local logs="${GPU_CHECK_LOGS:-$gpu/logs}"
  mkdir -p "$logs"
  local passed=0 failed=0 skipped=0 start=$SECONDS line name target args
  for line in "${CHECKS[@]}"; do
    read -r name target args <<<"$line"
    local bin log="$logs/$name.log" command=()
    bin="$gpu/bin/$(target_path "$target")"
    # args are word-split on purpose, but not globbed (--gtest_filter=Suite.*)
    set -f
    # shellcheck disable=SC2206
    command=("$bin" $args)
    set +f
    if [[ "$target" == python:* ]]; then
      bin="$gpu/${target#python:}"
      command=(env "PYTHONPATH=$gpu/python" python3 -W ignore "$bin")
    fi
    local left=$((BUDGET_S - (SECONDS - start)))
    if [ ! -e "$bin" ]; then
      echo "FAIL $name (not staged: $target; run stage again)"
      failed=$((failed + 1))
      continue
    fi
    if [ "$left" -le 5 ]; then
      echo "FAIL $name (no time left of ${BUDGET_S}s)"
      failed=$((failed + 1))
      continue
    fi
    local limit=$((left < CHECK_TIMEOUT_S ? left : CHECK_TIMEOUT_S)) rc=0 tmp
    tmp=$(mktemp -d)
    (set -f && cd "$gpu" && TEST_TMPDIR="$tmp" timeout -k 10 "$limit" "${command[@]}") >"$log" 2>&1 ||
      rc=$?
    rm -rf "$tmp"
    # A gtest binary that ran nothing but skipped tests says so; a partly skipped one passed.
    local ran skips
    ran=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) tests\?\..*/\1/p' "$log" | tail -n 1)
    skips=$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) tests\?,.*/\1/p' "$log" | tail -n 1)
    if [ "$rc" = 77 ] && [[ "$target" == python:* ]]; then
      echo "SKIP $name ($(tail -n 1 "$log"))"
      skipped=$((skipped + 1))
    elif [ "$rc" != 0 ]; then
      [ "$rc" = 124 ] && echo "FAIL $name (timed out after ${limit}s)" || echo "FAIL $name ($rc)"
      tail -n 30 "$log" | sed 's/^/    /'
      failed=$((failed + 1))
    elif [ "${ran:-}" = 0 ] && [ -n "${skips:-}" ]; then
      echo "SKIP $name ($(grep -m 1 -A 1 ': Skipped$' "$log" | tail -n 1))"
      skipped=$((skipped + 1))
    else
      echo "PASS $name${skips:+ ($skips skipped)}"
      passed=$((passed + 1))
    fi
  done
  echo "$passed passed, $failed failed ($skipped skipped; logs in $logs, $((SECONDS - start))s)"
  [ "$failed" = 0 ]
}

# Sourced (tools/gpu_bench.sh): the functions only.
if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
  case "${1:-}" in
    stage) stage ;;
    run) run ;;
    *) die "usage: tools/gpu_check.sh stage|run" ;;
  esac
fi

#!/usr/bin/env bash
# Runs the tests of zerotrain's concurrent code under sanitizers (docs/RELIABILITY.md):
#   asan  AddressSanitizer + UndefinedBehaviorSanitizer (--config=asan) over every test of comm/,
#         partition/, offload/, checkpoint/ and optim/ (the kernels' pointer arithmetic), and
#         engine/'s tests of the optimizer step over ShardSegments, the offloaded state (bf16 arrays
#         widened piece by piece too), the gradient statistics and the staging (CI's set: minutes, not the engine's half hour);
#   asan-full  the same over every test of engine/ too (run by hand, before a release);
#   tsan  ThreadSanitizer (--config=tsan) over the tests of comm/ and offload/ that run threads
#         (executors, Work handles, the shm backend, the launcher, asynchronous file I/O), with
#         tools/sanitizers/tsan.supp, whose every entry names an uninstrumented library.
# CI runs asan and tsan; any report fails the run.
# Usage: tools/sanitize.sh [asan|asan-full|tsan|all]
set -euo pipefail
cd "$(dirname "$0")/.."

asan_targets=(
  //comm/... //partition/... //offload/... //checkpoint/... //optim/...
  //engine:shard_optimizer_test //engine:engine_optimizers_test //engine:engine_offload_test
  //engine:engine_bf16_states_test
  //engine:grad_stats_test //engine:step_staging_test //engine:tensor_memory_test
  //engine:device_runtime_test
  //engine:mapped_block_cache_test
)
tsan_targets=(
  //comm:serial_executor_test //comm:work_test //comm:shm_backend_test //comm:launcher_test
  //comm:process_group_test
  //offload:async_file_io_test //offload:pinned_host_pool_test //offload:swap_space_test
)

run_asan() {
  echo "sanitize: ASan+UBSan over $*"
  # Only the tests and what they run: the benches in these packages add compiles, not checks.
  bazel test --config=asan --build_tests_only "$@"
}

run_tsan() {
  echo "sanitize: TSan over ${tsan_targets[*]}"
  # Tests run in the exec root (spawn_strategy=local), so an absolute path reaches them.
  bazel test --config=tsan --build_tests_only \
    --test_env=TSAN_OPTIONS="suppressions=$PWD/tools/sanitizers/tsan.supp halt_on_error=1 second_deadlock_stack=1" \
    "${tsan_targets[@]}"
}

case "${1:-all}" in
  asan) run_asan "${asan_targets[@]}" ;;
  asan-full) run_asan "${asan_targets[@]}" //engine/... ;;
  tsan) run_tsan ;;
  all) run_asan "${asan_targets[@]}" && run_tsan ;;
  *) echo "usage: tools/sanitize.sh [asan|asan-full|tsan|all]" >&2; exit 2 ;;
esac

// The test suites' two sizes. The short mode, the default, is what `bazel test //...` and CI run:
// every behaviour a slow suite checks, on fewer sizes and combinations. The full mode adds the
// rest of each grid (every world size for every stage, every schedule and seed) and is run by
// hand before a change that touches what those grids cover:
//   bazel test //... --test_env=ZEROTRAIN_TEST_MODE=full
// docs/BENCHMARKS.md records when it last ran, and how long each mode takes.
#pragma once

namespace zerotrain::testing {

// False unless ZEROTRAIN_TEST_MODE is "full". Any value but "short", "full" or none ends the
// process with a message naming the variable and the value: a typo must not silently shrink a run.
bool FullTestMode();

}  // namespace zerotrain::testing

// Throughput of the INT8 block kernels (int8_blocks.h) on this machine, per instruction set, for
// fp32 and bf16 input: what ZeRO++'s quantized collectives cost the CPU per element. Prints one
// line per (path, dtype, direction) with elements per second and ns per element, on one thread and
// on every intra-op thread LibTorch has.
// Usage: bazel run -c opt //comm:int8_blocks_bench [-- elements, default 16M]
#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/randn.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "comm/int8_blocks.h"

namespace {

using zerotrain::SimdPath;

template <class F>
double BestSeconds(F&& f) {
  double best = 1e30;
  for (int i = 0; i < 5; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    const std::chrono::duration<double> d = std::chrono::steady_clock::now() - t0;
    best = std::min(best, d.count());
  }
  return best;
}

void Run(int64_t n, int threads) {
  at::set_num_threads(threads);
  const int64_t block = zerotrain::comm::Int8BlockSize(n);
  std::vector<int8_t> q(n);
  std::vector<float> scales(zerotrain::comm::Int8BlockCount(n, block));
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    const at::Tensor x = at::randn({n}).to(dtype);
    at::Tensor out = at::empty({n}, x.options());
    for (SimdPath path : zerotrain::SupportedSimdPaths()) {
      const double tq = BestSeconds([&] {
        (void)zerotrain::comm::QuantizeInt8(x.data_ptr(), dtype, n, block, q.data(), scales.data(),
                                            path);
      });
      const double td = BestSeconds([&] {
        (void)zerotrain::comm::DequantizeInt8(q.data(), scales.data(), n, block, out.data_ptr(),
                                              dtype, path);
      });
      std::printf(
          "%-7s %-9s threads %d  quantize %7.0f M elem/s (%.2f ns/elem)  dequantize "
          "%7.0f M elem/s (%.2f ns/elem)\n",
          zerotrain::SimdPathName(path), c10::toString(dtype), threads, n / tq / 1e6, tq / n * 1e9,
          n / td / 1e6, td / n * 1e9);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t n = argc > 1 ? std::atoll(argv[1]) : (int64_t{1} << 24);
  const int all = at::get_num_threads();
  Run(n, 1);
  if (all > 1) Run(n, all);
  return 0;
}

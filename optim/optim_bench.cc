// Times one AdamW step over 10M and 50M fp32 parameters (one flat buffer, or 100 tensors of
// mixed sizes), on 1 thread and on all cores, for our FusedAdamStep, torch::optim::AdamW and
// ATen's fused CPU kernel at::_fused_adamw_, next to a bandwidth probe with the optimizer's
// access pattern (read p, g, m, v; write p, m, v) that gives the memory bound in ns per
// parameter. Caches are flushed before every timed step; each number is a median of 11 runs,
// the variants interleaved within each run.
// Prints a Markdown table (see docs/BENCHMARKS.md). Usage: optim_bench [--quick]
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <immintrin.h>
#include <torch/optim/adamw.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "optim/adam.h"
#include "optim/parallel.h"
#include "tools/cpu_dispatch.h"

namespace zerotrain::optim {
namespace {

int g_runs = 11;

// Evicts the buffers from every cache level: 256 MiB written and read back.
void FlushCaches() {
  static std::vector<char> junk(256 << 20);
  static char value = 0;
  std::memset(junk.data(), ++value, junk.size());
  volatile char sink = 0;
  for (size_t i = 0; i < junk.size(); i += 4096) sink = sink + junk[i];
}

struct Variant {
  std::string name;
  std::function<void()> step;
};

// Times the variants in turn within each run (probe, ours, torch, ...), so a burst of load from
// another process hits all of them alike instead of one variant's whole series; the caches are
// flushed before every timed step. Returns each variant's median in ms.
std::vector<double> InterleavedMedians(const std::vector<Variant>& variants) {
  for (const Variant& v : variants) v.step();  // warm-up: page faults, lazily created state
  std::vector<std::vector<double>> ms(variants.size());
  for (int r = 0; r < g_runs; ++r) {
    for (size_t i = 0; i < variants.size(); ++i) {
      FlushCaches();
      const auto start = std::chrono::steady_clock::now();
      variants[i].step();
      const auto stop = std::chrono::steady_clock::now();
      ms[i].push_back(std::chrono::duration<double, std::milli>(stop - start).count());
    }
  }
  std::vector<double> medians;
  for (std::vector<double>& m : ms) {
    std::nth_element(m.begin(), m.begin() + m.size() / 2, m.end());
    medians.push_back(m[m.size() / 2]);
  }
  return medians;
}

// The optimizer's traffic with next to no arithmetic: 4 fp32 streams read, 3 written in place.
__attribute__((target("avx2"))) void ProbeChunkAvx2(float* p, const float* g, float* m, float* v,
                                                    int64_t begin, int64_t end) {
  int64_t i = begin;
  for (; i + 8 <= end; i += 8) {
    const __m256 gi = _mm256_loadu_ps(g + i);
    _mm256_storeu_ps(m + i, _mm256_add_ps(_mm256_loadu_ps(m + i), gi));
    _mm256_storeu_ps(v + i, _mm256_add_ps(_mm256_loadu_ps(v + i), gi));
    _mm256_storeu_ps(p + i, _mm256_add_ps(_mm256_loadu_ps(p + i), gi));
  }
  for (; i < end; ++i) m[i] += g[i], v[i] += g[i], p[i] += g[i];
}

void Probe(int threads, float* p, const float* g, float* m, float* v, int64_t n) {
  const std::vector<Chunk> chunks = SplitIntoChunks({n});
  RunTasks(threads, static_cast<int64_t>(chunks.size()),
           [&](int64_t t) { ProbeChunkAvx2(p, g, m, v, chunks[t].begin, chunks[t].end); });
}

// 100 sizes summing to n, none a multiple of 16, from 0.2x to 1.8x the mean.
std::vector<int64_t> MixedSizes(int64_t n) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> spread(0.2, 1.8);
  std::vector<int64_t> sizes(100);
  int64_t used = 0;
  for (int i = 0; i < 99; ++i) {
    sizes[i] = static_cast<int64_t>(spread(rng) * n / 100) | 1;
    used += sizes[i];
  }
  sizes[99] = n - used;
  if (sizes[99] % 16 == 0) --sizes[99], ++sizes[98];
  return sizes;
}

struct Row {
  std::string variant;
  double ms;
};

struct Data {
  explicit Data(int64_t n) : p(n), g(n), m(n, 0.0f), v(n, 0.0f) {
    std::mt19937 rng(1);
    std::normal_distribution<float> d;
    for (int64_t i = 0; i < n; ++i) p[i] = d(rng), g[i] = d(rng);
  }
  std::vector<float> p, g, m, v;
};

std::vector<at::Tensor> Views(std::vector<float>& flat, const std::vector<int64_t>& sizes) {
  std::vector<at::Tensor> views;
  int64_t offset = 0;
  for (int64_t s : sizes) {
    views.push_back(at::from_blob(flat.data() + offset, {s}, at::kFloat));
    offset += s;
  }
  return views;
}

// Our step over `sizes` shards of d; low-precision gradients and a copy when `low` is given.
std::function<void()> OursStep(Data& d, const std::vector<int64_t>& sizes, int threads,
                               const std::vector<uint16_t>* low_grads, DType low,
                               std::vector<uint16_t>* out) {
  auto shards = std::make_shared<std::vector<AdamShard>>();
  int64_t offset = 0;
  for (int64_t s : sizes) {
    AdamShard a;
    a.size = s;
    a.params = d.p.data() + offset;
    a.grads = low_grads ? static_cast<const void*>(low_grads->data() + offset)
                        : static_cast<const void*>(d.g.data() + offset);
    a.grad_dtype = low_grads ? low : DType::kFloat32;
    a.exp_avg = d.m.data() + offset;
    a.exp_avg_sq = d.v.data() + offset;
    a.params_out = out ? out->data() + offset : nullptr;
    a.params_out_dtype = low;
    shards->push_back(a);
    offset += s;
  }
  AdamOptions o;
  o.adamw = true, o.weight_decay = 0.01, o.lr = 1e-6, o.threads = threads;
  auto step = std::make_shared<int64_t>(0);
  return [=] {
    if (!FusedAdamStep(o, ++*step, *shards).ok()) std::abort();
  };
}

std::function<void()> TorchAdamWStep(Data& d, const std::vector<int64_t>& sizes) {
  std::vector<at::Tensor> params = Views(d.p, sizes), grads = Views(d.g, sizes);
  for (size_t i = 0; i < params.size(); ++i) {
    params[i].set_requires_grad(true);
    params[i].mutable_grad() = grads[i];
  }
  auto opt = std::make_shared<torch::optim::AdamW>(
      params, torch::optim::AdamWOptions(1e-6).weight_decay(0.01));
  return [opt] { opt->step(); };
}

std::function<void()> FusedAdamWStep(Data& d, const std::vector<int64_t>& sizes) {
  auto lists = std::make_shared<std::vector<std::vector<at::Tensor>>>();
  lists->push_back(Views(d.p, sizes));
  lists->push_back(Views(d.g, sizes));
  lists->push_back(Views(d.m, sizes));
  lists->push_back(Views(d.v, sizes));
  lists->emplace_back();
  for (size_t i = 0; i < sizes.size(); ++i) lists->back().push_back(at::full({}, 10.0, at::kFloat));
  return [lists] {
    auto& l = *lists;
    at::_fused_adamw_(l[0], l[1], l[2], l[3], {}, l[4], 1e-6, 0.9, 0.999, 0.01, 1e-8, false, false);
  };
}

void PrintRow(int64_t n, const char* layout, int threads, const Row& r, double bound_ms,
              double torch_ms) {
  std::printf("| %lldM | %s | %d | %s | %.2f | %.3f | %.0f%% | %s |\n",
              static_cast<long long>(n / 1000000), layout, threads, r.variant.c_str(), r.ms,
              r.ms * 1e6 / n, 100.0 * bound_ms / r.ms,
              torch_ms > 0 ? (std::to_string(torch_ms / r.ms).substr(0, 4) + "x").c_str() : "");
}

std::vector<Row> RunConfig(int64_t n, bool mixed, int threads) {
  Data d(n);
  const std::vector<int64_t> sizes = mixed ? MixedSizes(n) : std::vector<int64_t>{n};
  const char* layout = mixed ? "100 mixed" : "flat";
  at::set_num_threads(threads);
  std::vector<Variant> variants = {
      {"probe (bound)", [&] { Probe(threads, d.p.data(), d.g.data(), d.m.data(), d.v.data(), n); }},
      {"ours FusedAdamStep", OursStep(d, sizes, threads, nullptr, DType::kFloat32, nullptr)},
      {"torch::optim::AdamW", TorchAdamWStep(d, sizes)},
      {"at::_fused_adamw_", FusedAdamWStep(d, sizes)},
  };
  const bool low_precision = !mixed && n >= 50000000;
  std::vector<uint16_t> bf16(low_precision ? n : 0, 0x3F80), fp16(low_precision ? n : 0, 0x3C00);
  std::vector<uint16_t> out(low_precision ? n : 0);
  if (low_precision) {
    variants.push_back({"ours, bf16 grads + bf16 copy",
                        OursStep(d, sizes, threads, &bf16, DType::kBFloat16, &out)});
    variants.push_back({"ours, fp16 grads + fp16 copy",
                        OursStep(d, sizes, threads, &fp16, DType::kFloat16, &out)});
  }
  const std::vector<double> ms = InterleavedMedians(variants);
  std::vector<Row> rows;
  for (size_t i = 0; i < variants.size(); ++i) rows.push_back({variants[i].name, ms[i]});
  for (const Row& r : rows) PrintRow(n, layout, threads, r, ms[0], r.ms == ms[2] ? 0 : ms[2]);
  std::fflush(stdout);
  return rows;
}

// The targets for 50M parameters on all cores; rows are probe, ours, torch, fused, ...
void PrintTargets(const std::vector<Row>& flat, const std::vector<Row>& mixed) {
  auto verdict = [](bool met) { return met ? "met" : "NOT met"; };
  std::printf("\nTargets (50M params, all cores):\n");
  std::printf("- ours >= 90%% of the bound: flat %.0f%%, mixed %.0f%% -> %s\n",
              100 * flat[0].ms / flat[1].ms, 100 * mixed[0].ms / mixed[1].ms,
              verdict(flat[0].ms / flat[1].ms >= 0.9 && mixed[0].ms / mixed[1].ms >= 0.9));
  std::printf("- >= 5x torch::optim::AdamW on flat: %.2fx -> %s\n", flat[2].ms / flat[1].ms,
              verdict(flat[2].ms / flat[1].ms >= 5));
  std::printf("- >= 3.5x torch::optim::AdamW on mixed: %.2fx -> %s\n", mixed[2].ms / mixed[1].ms,
              verdict(mixed[2].ms / mixed[1].ms >= 3.5));
  std::printf("- no slower than at::_fused_adamw_: flat %.2fx, mixed %.2fx -> %s\n",
              flat[3].ms / flat[1].ms, mixed[3].ms / mixed[1].ms,
              verdict(flat[1].ms <= flat[3].ms && mixed[1].ms <= mixed[3].ms));
  if (flat.size() > 5) {
    std::printf("- bf16 grads + bf16 copy: %.2fx the fp32 step; fp16: %.2fx\n",
                flat[4].ms / flat[1].ms, flat[5].ms / flat[1].ms);
  }
}

}  // namespace
}  // namespace zerotrain::optim

int main(int argc, char** argv) {
  using namespace zerotrain;
  using namespace zerotrain::optim;
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  if (quick) g_runs = 3;
  if (!CpuSupports(SimdPath::kAvx2)) {
    std::printf("optim_bench: the bandwidth probe needs AVX2, which this processor lacks\n");
    return 1;
  }
  const int all = ResolveThreadCount(0);
  std::printf("SIMD path: %s, cores: %d, runs per median: %d\n\n",
              SimdPathName(*ResolveSimdPath(SimdPath::kAuto)), all, g_runs);
  std::printf(
      "| params | layout | threads | variant | median ms | ns/param | bound/time | "
      "vs torch AdamW |\n|---|---|---|---|---|---|---|---|\n");
  std::vector<Row> big_flat, big_mixed;
  for (int64_t n : {int64_t{10000000}, int64_t{50000000}}) {
    if (quick && n > 10000000) break;
    for (bool mixed : {false, true}) {
      for (int threads : {1, all}) {
        std::vector<Row> rows = RunConfig(n, mixed, threads);
        if (n == 50000000 && threads == all) (mixed ? big_mixed : big_flat) = rows;
      }
    }
  }
  if (!big_flat.empty()) PrintTargets(big_flat, big_mixed);
  return 0;
}

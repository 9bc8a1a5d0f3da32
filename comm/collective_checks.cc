// Reference checks behind collective_checks.h.
#include "comm/collective_checks.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <ATen/ops/zeros.h>

#include <functional>

#include "absl/strings/str_cat.h"
#include "tools/status_macros.h"

namespace zerotrain::comm {
namespace {

at::Device g_device = at::kCPU;

constexpr int64_t kCounts[] = {0, 1, 7, 1000, (1 << 20) + 3};
constexpr at::ScalarType kDtypes[] = {at::kFloat, at::kBFloat16, at::kHalf, at::kInt, at::kLong};

// Rank r's element i before a reduction; at most 4 * 13, sums over 4 ranks at most 130.
double Input(int r, int64_t i) { return (r + 1) * (i % 13 + 1); }
// Rank r's element j of its shard before an all-gather.
double ShardInput(int r, int64_t j) { return (r + 1) * 16 + j % 7; }

at::Tensor Fill(int64_t n, at::ScalarType dtype, const std::function<double(int64_t)>& f) {
  at::Tensor t = at::empty({n}, at::kDouble);
  double* p = t.data_ptr<double>();
  for (int64_t i = 0; i < n; ++i) p[i] = f(i);
  return t.to(dtype).to(g_device);
}

absl::Status Expect(const at::Tensor& got, const std::function<double(int64_t)>& want,
                    const std::string& what) {
  at::Tensor d = got.to(at::kCPU).to(at::kDouble).contiguous();
  const double* p = d.data_ptr<double>();
  for (int64_t i = 0; i < d.numel(); ++i) {
    if (p[i] != want(i)) {
      return absl::InternalError(
          absl::StrCat(what, ": element ", i, " is ", p[i], ", expected ", want(i)));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckOne(ProcessGroup& g, at::ScalarType dtype, int64_t n) {
  const int w = g.world_size(), me = g.rank();
  const std::string tag = absl::StrCat(c10::toString(dtype), " n=", n);
  auto sum = [&](int64_t i) {
    double s = 0;
    for (int r = 0; r < w; ++r) s += Input(r, i);
    return s;
  };

  at::Tensor t = Fill(n, dtype, [&](int64_t i) { return Input(me, i); });
  ZT_RETURN_IF_ERROR(g.AllReduce(t, ReduceOp::kSum));
  ZT_RETURN_IF_ERROR(Expect(t, sum, "all_reduce sum " + tag));

  t = Fill(n, dtype, [&](int64_t i) { return Input(me, i); });
  ZT_RETURN_IF_ERROR(g.AllReduce(t, ReduceOp::kMax));
  ZT_RETURN_IF_ERROR(Expect(
      t, [&](int64_t i) { return Input(w - 1, i); }, "all_reduce max " + tag));

  const bool floating = at::isFloatingType(dtype);
  if (floating) {
    t = Fill(n, dtype, [&](int64_t i) { return Input(me, i); });
    ZT_RETURN_IF_ERROR(g.AllReduce(t, ReduceOp::kAvg));
    ZT_RETURN_IF_ERROR(Expect(
        t, [&](int64_t i) { return sum(i) / w; }, "all_reduce avg " + tag));
  }

  const int64_t shard = ShardNumel(n, w);
  at::Tensor in = Fill(n, dtype, [&](int64_t i) { return Input(me, i); });
  at::Tensor out = at::full({shard}, -1, at::TensorOptions().dtype(dtype).device(g_device));
  ZT_RETURN_IF_ERROR(g.ReduceScatter(in, out, floating ? ReduceOp::kAvg : ReduceOp::kSum));
  ZT_RETURN_IF_ERROR(Expect(
      out,
      [&](int64_t j) {
        const int64_t i = me * shard + j;
        return i < n ? (floating ? sum(i) / w : sum(i)) : 0.0;
      },
      "reduce_scatter " + tag));
  ZT_RETURN_IF_ERROR(Expect(
      in, [&](int64_t i) { return Input(me, i); }, "reduce_scatter input " + tag));

  at::Tensor mine = Fill(shard, dtype, [&](int64_t j) { return ShardInput(me, j); });
  at::Tensor gathered = at::full({n}, -1, at::TensorOptions().dtype(dtype).device(g_device));
  ZT_RETURN_IF_ERROR(g.AllGather(mine, gathered));
  ZT_RETURN_IF_ERROR(Expect(
      gathered, [&](int64_t i) { return ShardInput(i / shard, i % shard); }, "all_gather " + tag));

  if (n % w == 0) {  // in place: the shard is this rank's own part of the output
    gathered = at::full({n}, -1, at::TensorOptions().dtype(dtype).device(g_device));
    gathered.narrow(0, me * shard, shard).copy_(mine);
    ZT_RETURN_IF_ERROR(g.AllGather(gathered.narrow(0, me * shard, shard), gathered));
    ZT_RETURN_IF_ERROR(Expect(
        gathered, [&](int64_t i) { return ShardInput(i / shard, i % shard); },
        "all_gather in place " + tag));
  }

  if (shard > 0) {  // the row form: every rank's shard into columns [1, shard] of row r, in place
    const int64_t width = shard + 3;
    at::Tensor buffer = at::full({w, width}, -1, at::TensorOptions().dtype(dtype).device(g_device));
    at::Tensor rows = buffer.narrow(1, 1, shard);
    rows.select(0, me).copy_(mine);
    ZT_RETURN_IF_ERROR(g.AllGather(rows.select(0, me), rows));
    ZT_RETURN_IF_ERROR(Expect(
        buffer.view({-1}),
        [&](int64_t i) {
          const int64_t c = i % width;
          return c >= 1 && c <= shard ? ShardInput(static_cast<int>(i / width), c - 1) : -1.0;
        },
        "all_gather into rows " + tag));
  }

  // All-to-all over shard * w elements: block r of the output is block `me` of rank r's input.
  const int64_t nw = shard * w;
  in = Fill(nw, dtype, [&](int64_t i) { return Input(me, i); });
  out = at::full({nw}, -1, at::TensorOptions().dtype(dtype).device(g_device));
  ZT_RETURN_IF_ERROR(g.AllToAll(in, out));
  ZT_RETURN_IF_ERROR(Expect(
      out, [&](int64_t i) { return Input(static_cast<int>(i / shard), me * shard + i % shard); },
      "all_to_all " + tag));

  const int root = w - 1;
  t = me == root ? Fill(n, dtype, [&](int64_t i) { return Input(root, i); })
                 : at::zeros({n}, at::TensorOptions().dtype(dtype).device(g_device));
  ZT_RETURN_IF_ERROR(g.Broadcast(t, root));
  return Expect(
      t, [&](int64_t i) { return Input(root, i); }, "broadcast " + tag);
}

}  // namespace

absl::Status CheckEveryCollective(ProcessGroup& group, const at::Device& device) {
  g_device = device;
  for (at::ScalarType dtype : kDtypes) {
    for (int64_t n : kCounts) ZT_RETURN_IF_ERROR(CheckOne(group, dtype, n));
  }
  return absl::OkStatus();
}

}  // namespace zerotrain::comm

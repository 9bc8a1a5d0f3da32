// ShardedParams on real ranks: parameters read inside a window hold exactly their original
// values, hold nothing and refuse to be read outside one, come back in backward after being
// released, stay within the live budget, are prefetched once the order is recorded, survive a
// change of order, and take values written back while pinned.
#include "partition/sharded_params.h"

#include <torch/types.h>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/spawn_ranks.h"
#include "tools/status_macros.h"

namespace zerotrain::partition {
namespace {

// Three "submodules" of 2, 1 and 2 parameters; values depend on the element index only.
NamedTensors MakeParams() {
  NamedTensors named;
  const std::vector<std::pair<std::string, std::vector<int64_t>>> shapes = {{"a.weight", {6, 5}},
                                                                            {"a.bias", {6}},
                                                                            {"b.weight", {5, 6}},
                                                                            {"c.weight", {7, 3}},
                                                                            {"c.bias", {7}}};
  for (const auto& [name, shape] : shapes) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    torch::Tensor t = (torch::arange(n).to(torch::kFloat) * 0.01 + static_cast<double>(name.size()))
                          .reshape(shape);
    named.emplace_back(name, t.set_requires_grad(true));
  }
  return named;
}

std::vector<torch::Tensor> Copies(const NamedTensors& named) {
  std::vector<torch::Tensor> out;
  for (const auto& [name, p] : named) out.push_back(p.detach().clone());
  return out;
}

absl::StatusOr<std::unique_ptr<comm::ProcessGroup>> Join() {
  ZT_ASSIGN_OR_RETURN(auto info, comm::RendezvousFromEnv());
  return comm::ProcessGroup::Create(info, {});
}

absl::Status Expect(bool ok, const std::string& what) {
  return ok ? absl::OkStatus() : absl::InternalError(what);
}

absl::StatusOr<std::string> ReadWriteAndBudget(Stage3Options o) {
  ZT_ASSIGN_OR_RETURN(auto group, Join());
  NamedTensors named = MakeParams();
  const std::vector<torch::Tensor> want = Copies(named);
  ZT_ASSIGN_OR_RETURN(auto sp, ShardedParams::Create(named, {2, 3}, group.get(), 8, o));
  const ShardLayout& layout = sp->layout();
  ZT_RETURN_IF_ERROR(Expect(named[0].second.numel() == 0, "shape outside a window is not [0]"));
  ZT_RETURN_IF_ERROR(Expect(sp->FullShape(0) == std::vector<int64_t>({6, 5}), "full shape"));
  try {
    (void)named[0].second.sum();
    return absl::InternalError("reading outside a window did not fail");
  } catch (const c10::Error& e) {
    const std::string m = e.what_without_backtrace();
    ZT_RETURN_IF_ERROR(Expect(m.find("'a.weight'") != std::string::npos &&
                                  m.find("GatheredParameters") != std::string::npos,
                              "message: " + m));
  }
  int64_t largest = 0;
  for (int s = 0; s < layout.num_segments(); ++s) {
    largest = std::max(largest, layout.SegmentNumel(s));
  }
  // Three iterations: a forward-like pass over a, b, c and a backward-like one over c, b, a.
  for (int it = 0; it < 3; ++it) {
    sp->OpenWindow();
    torch::Tensor x = torch::ones({4, 5}, torch::requires_grad());
    torch::Tensor h = torch::tanh(torch::linear(x, named[0].second, named[1].second));
    h = torch::linear(h, named[2].second);  // [4, 5]
    torch::Tensor out = torch::linear(h.narrow(1, 0, 3), named[3].second, named[4].second);
    torch::Tensor ref = torch::linear(
        torch::linear(torch::tanh(torch::linear(x.detach(), want[0], want[1])), want[2])
            .narrow(1, 0, 3),
        want[3], want[4]);
    ZT_RETURN_IF_ERROR(Expect(torch::equal(out.detach(), ref), "forward values differ"));
    out.sum().backward();  // needs b.weight and a.weight again for x's gradient
    torch::Tensor xr = torch::ones({4, 5}, torch::requires_grad());
    torch::linear(
        torch::linear(torch::tanh(torch::linear(xr, want[0], want[1])), want[2]).narrow(1, 0, 3),
        want[3], want[4])
        .sum()
        .backward();
    ZT_RETURN_IF_ERROR(Expect(torch::allclose(x.grad(), xr.grad()), "input gradient differs"));
    ZT_RETURN_IF_ERROR(sp->EndIteration());
    sp->CloseWindow();
    const GatherStats st = sp->stats();
    ZT_RETURN_IF_ERROR(Expect(st.live_numel == 0, "segments alive after EndIteration"));
    ZT_RETURN_IF_ERROR(Expect(st.peak_live_numel <= o.max_live_numel + largest,
                              absl::StrCat("peak ", st.peak_live_numel, " over budget ",
                                           o.max_live_numel, " + ", largest)));
  }
  const GatherStats st = sp->stats();
  if (o.prefetch_numel > 0) {
    ZT_RETURN_IF_ERROR(Expect(st.prefetches > 0, "nothing was prefetched"));
  } else {
    ZT_RETURN_IF_ERROR(Expect(st.prefetches == 0, "prefetched with a zero budget"));
  }
  // A different order: b first. It must still read the right values.
  sp->OpenWindow();
  ZT_RETURN_IF_ERROR(Expect(torch::equal(named[2].second * 1, want[2]), "b after reorder"));
  ZT_RETURN_IF_ERROR(Expect(torch::equal(named[0].second * 1, want[0]), "a after reorder"));
  ZT_RETURN_IF_ERROR(sp->EndIteration());
  sp->CloseWindow();
  ZT_RETURN_IF_ERROR(Expect(sp->stats().order_departures == 1,
                            absl::StrCat("departures ", sp->stats().order_departures)));
  // Pin, write, write back, refresh: every rank reads the new values.
  ZT_RETURN_IF_ERROR(sp->Pin({2}));
  {
    torch::NoGradGuard no_grad;
    named[2].second.fill_(0.5);
  }
  ZT_RETURN_IF_ERROR(sp->WriteBack(2));
  sp->Unpin({2});
  ZT_RETURN_IF_ERROR(Expect(named[2].second.numel() == 0, "unpinned shape is not [0]"));
  ZT_RETURN_IF_ERROR(sp->Refresh());
  sp->OpenWindow();
  const bool written = torch::equal(named[2].second * 1, torch::full({5, 6}, 0.5));
  const bool others = torch::equal(named[0].second * 1, want[0]);
  sp->CloseWindow();
  ZT_RETURN_IF_ERROR(Expect(written && others, "written-back values not seen after Refresh"));
  return std::string("ok");
}

void RunOnRanks(int world, Stage3Options o) {
  auto outcomes = zerotrain::testing::SpawnRanks(world, [o](int) { return ReadWriteAndBudget(o); });
  for (const auto& r : outcomes) {
    EXPECT_TRUE(r.status.ok()) << zerotrain::testing::FormatOutcomes(outcomes);
  }
}

TEST(ShardedParamsTest, TwoRanksPrefetchUnboundedLive) {
  Stage3Options o;
  o.persistence_threshold = 0;
  RunOnRanks(2, o);
}

TEST(ShardedParamsTest, ThreeRanksTightLiveBudgetNoPrefetch) {
  Stage3Options o;
  o.persistence_threshold = 0;
  o.prefetch_numel = 0;
  o.max_live_numel = 10;
  RunOnRanks(3, o);
}

TEST(ShardedParamsTest, FourRanksPersistentSmallSegmentAndNoReuse) {
  Stage3Options o;
  o.persistence_threshold = 29;  // c (28 elements) stays whole
  o.max_reuse_distance = 0;
  o.max_live_numel = 70;  // a (36 padded) and b (32) fit together: prefetch can run
  RunOnRanks(4, o);
}

TEST(ShardedParamsTest, OneRank) {
  Stage3Options o;
  o.persistence_threshold = 0;
  RunOnRanks(1, o);
}

}  // namespace
}  // namespace zerotrain::partition

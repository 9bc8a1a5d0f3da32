// GradientReducer hands each rank exactly the average over ranks of the gradients of the elements
// it owns (stage 0: all of them), for every stage, with overlap on and off, reduce-scatter and
// all-reduce, buckets smaller than a parameter, a parameter count no world size divides, and
// gradient accumulation over two micro-steps. The expected values are computed independently
// from the closed-form gradients of a weighted sum. At stages 1 and 2 on_owned_final sees each
// bucket's owned gradients once, in bucket order, in the last micro-step only, already final.
// With a GradShardSink (stage 2) the reducer keeps nothing: the sink gets every owned slice once
// per backward, in shard order and end to end, told to replace on the first and add on the next,
// and to replace again after Zero() or after a pass the sink failed part-way.
#include "partition/gradient_reducer.h"

#include <torch/types.h>

#include <functional>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/spawn_ranks.h"
#include "tools/status_macros.h"

namespace zerotrain::partition {
namespace {

struct Case {
  int stage;
  bool overlap;
  bool reduce_scatter;
  bool sink = false;
};

// Keeps the shard as a sink's user would, checking the order of the calls as they come.
class RecordingSink : public GradShardSink {
 public:
  explicit RecordingSink(int64_t numel) : values(numel, 0.0) {}
  absl::Status Begin(bool accumulate) override {
    begins.push_back(accumulate);
    if (!accumulate) std::fill(values.begin(), values.end(), 0.0);
    end_ = 0;
    return absl::OkStatus();
  }
  absl::Status Add(int64_t offset, const at::Tensor& reduced) override {
    if (fail_next_add) {
      fail_next_add = false;
      return absl::DataLossError("the sink failed");
    }
    if (offset != end_) {
      return absl::InternalError(absl::StrCat("slice at ", offset, " after one ending at ", end_));
    }
    for (int64_t e = 0; e < reduced.numel(); ++e) values[offset + e] += reduced[e].item<double>();
    end_ = offset + reduced.numel();
    return absl::OkStatus();
  }
  absl::Status Finish() override {
    if (end_ != static_cast<int64_t>(values.size())) {
      return absl::InternalError(absl::StrCat("the slices ended at ", end_));
    }
    return absl::OkStatus();
  }
  std::vector<double> values;
  std::vector<bool> begins;
  bool fail_next_add = false;

 private:
  int64_t end_ = 0;
};

// d(loss)/d(p[j]) on `rank` in micro-step `micro` is Coef(rank, micro, global index j).
float Coef(int rank, int micro, int64_t j) { return 0.25f * (rank + 1) + 0.5f * micro + j % 7; }

absl::StatusOr<std::string> ReduceAndCheck(const Case& c) {
  auto info = comm::RendezvousFromEnv();
  if (!info.ok()) return info.status();
  ZT_ASSIGN_OR_RETURN(auto group, comm::ProcessGroup::Create(*info, {}));
  const int rank = group->rank(), world = group->world_size();
  NamedTensors named = {{"a", torch::zeros({3, 5}, torch::requires_grad())},
                        {"b", torch::zeros({40}, torch::requires_grad())},
                        {"c", torch::zeros({3}, torch::requires_grad())}};
  ZT_ASSIGN_OR_RETURN(auto flat, FlatParams::Create(named, world, /*bucket_numel=*/12));
  const GradKeeping keeping[] = {GradKeeping::kWhole, GradKeeping::kOwnedSlices,
                                 GradKeeping::kShard};
  ReducerOptions ro;
  ro.keeping = keeping[c.stage];
  ro.overlap_comm = c.overlap;
  ro.reduce_scatter = c.reduce_scatter;
  RecordingSink sink(flat.layout().shard_numel());
  if (c.sink) ro.grad_sink = &sink;
  int micro = 0;
  std::vector<std::pair<int, GradSegment>> finals;  // (micro-step, a copy of the segment)
  ro.on_owned_final = [&](const GradSegment& g) {
    finals.push_back({micro, GradSegment{g.shard_offset, g.flat_begin, g.grads.clone()}});
  };
  ZT_ASSIGN_OR_RETURN(auto reducer, GradientReducer::Create(group.get(), &flat, ro));
  const int64_t n = flat.layout().numel();
  for (micro = 0; micro < 2; ++micro) {
    reducer->BeginBackward(/*reduce=*/micro == 1);
    torch::Tensor loss = torch::zeros({});
    int64_t at = 0;
    for (const auto& [name, p] : flat.params()) {
      torch::Tensor coef = torch::empty({p.numel()});
      for (int64_t j = 0; j < p.numel(); ++j) coef[j] = Coef(rank, micro, at + j);
      loss = loss + (p.reshape({-1}) * coef).sum();
      at += p.numel();
    }
    loss.backward();
    ZT_RETURN_IF_ERROR(reducer->FinishBackward(false));
  }
  for (const auto& [name, p] : flat.params()) {
    if (p.grad().defined()) return absl::InternalError(absl::StrCat(name, ".grad survived"));
  }
  if (c.sink && (reducer->grad_bytes() != 0 || sink.begins != std::vector<bool>({false, true}))) {
    return absl::InternalError(
        "the sink's passes are not (replace, accumulate), or a shard is kept");
  }
  int64_t checked = 0;
  for (const GradSegment& s : reducer->OwnedGrads()) {
    for (int64_t e = 0; e < s.numel; ++e) {
      const int64_t j = s.flat_begin + e;
      double want = 0;
      if (j < n) {
        for (int r = 0; r < world; ++r) want += Coef(r, 0, j) + Coef(r, 1, j);
        want /= world;
      }
      const double got = c.sink ? sink.values[s.shard_offset + e] : s.grads[e].item<double>();
      if (std::abs(got - want) > 1e-5) {
        return absl::InternalError(absl::StrCat("flat element ", j, ": got ", got, " want ", want));
      }
      if (c.stage > 0 && j < flat.layout().padded_numel() && flat.layout().OwnerOf(j) != rank) {
        return absl::InternalError(absl::StrCat("element ", j, " is not this rank's"));
      }
      ++checked;
    }
  }
  const std::vector<GradSegment> owned = reducer->OwnedGrads();
  if (c.stage == 0 || c.sink ? !finals.empty() : finals.size() != owned.size()) {
    return absl::InternalError(absl::StrCat("on_owned_final ran ", finals.size(), " times for ",
                                            owned.size(), " owned segments at stage ", c.stage));
  }
  for (size_t k = 0; k < finals.size(); ++k) {
    const auto& [when, g] = finals[k];
    if (when != 1 || g.shard_offset != owned[k].shard_offset ||
        !torch::equal(g.grads, owned[k].grads)) {
      return absl::InternalError(absl::StrCat("on_owned_final call ", k, " (micro-step ", when,
                                              ", shard offset ", g.shard_offset, ") is not bucket ",
                                              k, "'s final gradients"));
    }
  }
  if (c.sink) {
    // One backward of the plain sum, after `setup`; whether the sink was told to accumulate.
    auto pass = [&](const std::function<void()>& setup) -> absl::StatusOr<bool> {
      setup();
      reducer->BeginBackward(/*reduce=*/true);
      torch::Tensor loss = torch::zeros({});
      for (const auto& [name, p] : flat.params()) loss = loss + p.sum();
      loss.backward();
      ZT_RETURN_IF_ERROR(reducer->FinishBackward(false));
      return bool(sink.begins.back());
    };
    ZT_ASSIGN_OR_RETURN(const bool after_zero, pass([&] { reducer->Zero(); }));
    const absl::StatusOr<bool> failed = pass([&] { sink.fail_next_add = true; });
    ZT_ASSIGN_OR_RETURN(const bool after_failure, pass([] {}));
    if (after_zero || failed.ok() || after_failure) {
      return absl::InternalError(absl::StrCat(
          "after Zero() the sink was told to ", after_zero ? "accumulate" : "replace",
          ", a failing sink's pass ", failed.ok() ? "succeeded" : "failed",
          ", the pass after it was told to ", after_failure ? "accumulate" : "replace"));
    }
  }
  const int64_t want_checked =
      c.stage == 0 ? flat.layout().padded_numel() : flat.layout().shard_numel();
  if (checked != want_checked) {
    return absl::InternalError(absl::StrCat("checked ", checked, " elements, want ", want_checked));
  }
  return std::string("ok");
}

class GradientReducerTest : public ::testing::TestWithParam<Case> {};

TEST_P(GradientReducerTest, OwnedGradientsAreTheRankAverage) {
  const Case c = GetParam();
  auto outcomes = zerotrain::testing::SpawnRanks(3, [c](int) { return ReduceAndCheck(c); });
  for (const auto& o : outcomes) {
    EXPECT_TRUE(o.status.ok()) << zerotrain::testing::FormatOutcomes(outcomes);
  }
}

INSTANTIATE_TEST_SUITE_P(Stages, GradientReducerTest,
                         ::testing::Values(Case{0, true, true}, Case{1, true, true},
                                           Case{1, false, false}, Case{2, true, true},
                                           Case{2, false, true}, Case{2, true, false},
                                           Case{2, true, true, true}, Case{2, false, false, true}));

}  // namespace
}  // namespace zerotrain::partition

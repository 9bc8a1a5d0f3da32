// DistributedSampler and EvalBatches checked by enumeration: disjoint ranks, full coverage of an
// epoch, the same sequence for the same seed, Seek() continuing exactly, a resume on another world
// size (2 -> 4 and 4 -> 2 ranks) reading the same samples as a straight run, and eval sharding.
#include "trainer/data/sampler.h"

#include <gtest/gtest.h>
#include <torch/types.h>

#include <set>

#include "trainer/data/token_dataset.h"

namespace zerotrain::trainer {
namespace {

DistributedSampler Make(int64_t windows, int world, int rank, int64_t batch, uint64_t seed) {
  auto s = DistributedSampler::Create(windows, world, rank, batch, seed);
  EXPECT_TRUE(s.ok()) << s.status();
  return *s;
}

std::vector<std::vector<int64_t>> Take(DistributedSampler& s, int steps) {
  std::vector<std::vector<int64_t>> out;
  for (int i = 0; i < steps; ++i) out.push_back(s.NextWindows());
  return out;
}

TEST(SamplerTest, RanksAreDisjointAndAnEpochCoversEveryWindow) {
  const int64_t windows = 100, batch = 5;
  const int world = 2;
  std::vector<DistributedSampler> ranks;
  for (int r = 0; r < world; ++r) ranks.push_back(Make(windows, world, r, batch, 9));
  for (int64_t epoch = 0; epoch < 2; ++epoch) {
    std::set<int64_t> seen;
    for (int step = 0; step < 10; ++step) {
      for (auto& s : ranks) {
        EXPECT_EQ(s.epoch(), epoch);
        for (int64_t w : s.NextWindows()) {
          EXPECT_TRUE(w >= 0 && w < windows);
          EXPECT_TRUE(seen.insert(w).second) << "window " << w << " twice in epoch " << epoch;
        }
      }
    }
    EXPECT_EQ(seen.size(), 100u);
  }
  EXPECT_EQ(ranks[0].position(), (DataPosition{2, 0}));
}

// The global sample order a job of `world` ranks reads in `steps` micro-steps from `from`: each
// micro-step's windows of rank 0, then rank 1, ... The position all ranks end at goes to `end`.
std::vector<int64_t> JobOrder(int64_t windows, int world, int64_t batch, DataPosition from,
                              int steps, DataPosition* end) {
  std::vector<DistributedSampler> ranks;
  for (int r = 0; r < world; ++r) {
    ranks.push_back(Make(windows, world, r, batch, 5));
    EXPECT_TRUE(ranks.back().Seek(from).ok());
  }
  std::vector<int64_t> order;
  for (int step = 0; step < steps; ++step) {
    for (auto& s : ranks) {
      for (int64_t w : s.NextWindows()) order.push_back(w);
    }
  }
  for (auto& s : ranks) EXPECT_EQ(s.position(), ranks[0].position());
  *end = ranks[0].position();
  return order;
}

// The reference: one window at a time (world 1, batch 1), each epoch a permutation of its own.
TEST(SamplerTest, AResumeOnAnotherWorldSizeReadsTheStraightRunsOrder) {
  const int64_t windows = 53;  // prime: the 2- and 4-rank micro-steps span epochs
  DataPosition end;
  const std::vector<int64_t> straight = JobOrder(windows, 1, 1, {}, 400, &end);
  EXPECT_EQ(end, (DataPosition{7, 29}));
  for (int e = 0; e < 7; ++e) {
    std::set<int64_t> epoch(straight.begin() + e * windows, straight.begin() + (e + 1) * windows);
    EXPECT_EQ(epoch.size(), static_cast<size_t>(windows)) << "epoch " << e;
  }
  struct Leg {
    int world;
    int64_t batch;
    int steps;
  };
  const std::vector<std::vector<Leg>> jobs = {
      {{2, 3, 7}, {4, 3, 11}},             // 2 -> 4 ranks, the same micro-batch
      {{4, 3, 9}, {2, 3, 13}},             // 4 -> 2 ranks
      {{2, 4, 10}, {4, 2, 9}, {2, 5, 6}},  // the micro-batch changes too
  };
  for (const auto& legs : jobs) {
    std::vector<int64_t> order;
    DataPosition at;
    for (const Leg& leg : legs) {
      const std::vector<int64_t> part = JobOrder(windows, leg.world, leg.batch, at, leg.steps, &at);
      order.insert(order.end(), part.begin(), part.end());
    }
    ASSERT_LE(order.size(), straight.size());
    EXPECT_EQ(order, std::vector<int64_t>(straight.begin(), straight.begin() + order.size()))
        << "from " << legs[0].world << " to " << legs[1].world << " ranks";
    EXPECT_EQ(at.epoch * windows + at.sample, static_cast<int64_t>(order.size()));
  }
}

TEST(SamplerTest, SameSeedSameBatchesAndEpochsReshuffle) {
  DistributedSampler a = Make(50, 1, 0, 5, 42), b = Make(50, 1, 0, 5, 42),
                     c = Make(50, 1, 0, 5, 43);
  const auto ta = Take(a, 20), tb = Take(b, 20), tc = Take(c, 20);
  EXPECT_EQ(ta, tb);
  EXPECT_NE(ta, tc);
  EXPECT_NE(std::vector<std::vector<int64_t>>(ta.begin(), ta.begin() + 10),
            std::vector<std::vector<int64_t>>(ta.begin() + 10, ta.end()));
}

TEST(SamplerTest, SeekContinuesTheExactSequence) {
  DistributedSampler a = Make(60, 3, 1, 4, 7);
  const auto all = Take(a, 17);  // 12 samples a micro-step: crosses three epoch boundaries
  EXPECT_EQ(a.position(), (DataPosition{3, 24}));
  DistributedSampler b = Make(60, 3, 1, 4, 7);
  ASSERT_TRUE(b.Seek({1, 36}).ok());  // after 8 micro-steps
  const auto rest = Take(b, 9);
  EXPECT_EQ(rest, std::vector<std::vector<int64_t>>(all.begin() + 8, all.end()));
  ASSERT_TRUE(b.Seek({}).ok());
  EXPECT_EQ(b.NextWindows(), all[0]);
  const absl::Status beyond = b.Seek({0, 60});
  EXPECT_FALSE(beyond.ok());
  EXPECT_NE(beyond.message().find("60 windows"), std::string::npos) << beyond;
}

TEST(SamplerTest, NextBatchGathersTheWindows) {
  std::vector<uint32_t> tokens(201);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint32_t>(i);
  TokenDataset data(tokens, 201, 10, "test");
  DistributedSampler s = Make(data.NumTrainWindows(), 1, 0, 3, 1), t = s;
  Batch b = s.NextBatch(data);
  std::vector<int64_t> w = t.NextWindows();
  for (int i = 0; i < 3; ++i) EXPECT_EQ(b.x[i][0].item<int64_t>(), w[i] * 10);
}

TEST(SamplerTest, CreateRejectsBadArguments) {
  EXPECT_FALSE(DistributedSampler::Create(10, 2, 2, 1, 0).ok());
  EXPECT_FALSE(DistributedSampler::Create(10, 2, 0, 0, 0).ok());
  auto few = DistributedSampler::Create(7, 2, 0, 4, 0);
  ASSERT_FALSE(few.ok());
  EXPECT_NE(few.status().message().find("7 windows"), std::string::npos) << few.status();
}

TEST(EvalBatchesTest, ShardsTheSplitEquallyAndInOrder) {
  std::vector<uint32_t> tokens(1000);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint32_t>(i % 997);
  TokenDataset data(tokens, 500, 10, "test");  // 49 eval windows: 13 batches of 4, last holds 1
  std::multiset<int64_t> starts;
  for (int r = 0; r < 2; ++r) {
    EvalBatches eval(data, 2, r, 4, 0);
    EXPECT_EQ(eval.batches_per_rank(), 6);
    Batch b;
    int n = 0;
    while (eval.Next(&b)) {
      for (int64_t i = 0; i < b.x.size(0); ++i) starts.insert(b.x[i][0].item<int64_t>());
      ++n;
    }
    EXPECT_EQ(n, 6);
  }
  EXPECT_EQ(starts.size(), 48u);
  EXPECT_EQ(std::set<int64_t>(starts.begin(), starts.end()).size(), 48u);
  EXPECT_EQ(*starts.begin(), 500);
  EvalBatches capped(data, 2, 1, 4, 3);
  EXPECT_EQ(capped.batches_per_rank(), 1);
  Batch first, again;
  ASSERT_TRUE(capped.Next(&first));
  EXPECT_FALSE(capped.Next(&again));
  capped.Reset();
  ASSERT_TRUE(capped.Next(&again));
  EXPECT_TRUE(torch::equal(first.x, again.x));
  EXPECT_EQ(first.x[0][0].item<int64_t>(), 540);  // batch 1 of the split, windows 4..7
}

}  // namespace
}  // namespace zerotrain::trainer

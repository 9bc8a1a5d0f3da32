// DistributedSampler and EvalBatches checked by enumeration: disjoint ranks, full coverage of an
// epoch, the same sequence for the same seed, Seek() continuing exactly, and eval sharding.
#include "trainer/data/sampler.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <set>

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

TEST(SamplerTest, RanksAreDisjointAndAnEpochCoversAllButTheRemainder) {
  const int64_t windows = 103, batch = 5;
  const int world = 2;
  std::vector<DistributedSampler> ranks;
  for (int r = 0; r < world; ++r) ranks.push_back(Make(windows, world, r, batch, 9));
  EXPECT_EQ(ranks[0].steps_per_epoch(), 10);
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
  const auto all = Take(a, 17);  // 5 steps per epoch: crosses three epoch boundaries
  EXPECT_EQ(a.position(), 17);
  DistributedSampler b = Make(60, 3, 1, 4, 7);
  b.Seek(8);
  const auto rest = Take(b, 9);
  EXPECT_EQ(rest, std::vector<std::vector<int64_t>>(all.begin() + 8, all.end()));
  b.Seek(0);
  EXPECT_EQ(b.NextWindows(), all[0]);
}

TEST(SamplerTest, NextBatchGathersTheWindows) {
  std::vector<uint16_t> tokens(201);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint16_t>(i);
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
  std::vector<uint16_t> tokens(1000);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint16_t>(i % 997);
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

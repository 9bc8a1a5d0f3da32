// ShardLayout covers every flat element exactly once: each padded element has one owner, every
// rank's owned slices map one-to-one onto its shard, parameter pieces tile each parameter, and
// each bucket's owned slices are what a plain reduce-scatter of that bucket hands each rank.
#include "partition/shard_layout.h"

#include <tuple>
#include <vector>

#include "gtest/gtest.h"

namespace zerotrain::partition {
namespace {

struct Case {
  std::vector<int64_t> numels;
  int world;
  int64_t bucket;
  std::vector<int> segments = {};
};

class ShardLayoutTest : public ::testing::TestWithParam<Case> {};

TEST_P(ShardLayoutTest, EveryElementOwnedExactlyOnce) {
  const Case& c = GetParam();
  auto layout = ShardLayout::Create(c.numels, c.world, c.bucket, c.segments);
  ASSERT_TRUE(layout.ok()) << layout.status();
  int64_t total = 0;
  for (int64_t n : c.numels) total += n;
  EXPECT_EQ(layout->numel(), total);
  EXPECT_EQ(layout->padded_numel() % c.world, 0);
  EXPECT_GE(layout->padded_numel(), total);
  // At most W-1 elements of padding after each segment.
  EXPECT_LT(layout->padded_numel() - total, c.world * layout->num_segments());

  // Segments start buckets of their own, and their buckets hold only their parameters.
  ASSERT_EQ(layout->num_segments(), static_cast<int>(c.segments.size()) + 1);
  for (int s = 0; s < layout->num_segments(); ++s) {
    const int first = layout->SegmentFirstParam(s);
    EXPECT_EQ(layout->buckets()[layout->SegmentFirstBucket(s)].begin, layout->param_offset(first));
    for (int k = layout->SegmentFirstBucket(s); k < layout->SegmentEndBucket(s); ++k) {
      const LayoutBucket& b = layout->buckets()[k];
      for (int p = b.first_param; p < b.end_param; ++p) {
        if (layout->param_numel(p) == 0) continue;
        EXPECT_GE(p, first) << "bucket " << k;
        EXPECT_LT(p, layout->SegmentEndParam(s)) << "bucket " << k;
      }
    }
  }
  EXPECT_EQ(layout->SegmentEndBucket(layout->num_segments() - 1),
            static_cast<int>(layout->buckets().size()));
  int64_t segments_numel = 0;
  for (int s = 0; s < layout->num_segments(); ++s) {
    EXPECT_EQ(layout->SegmentBegin(s), segments_numel);
    segments_numel += layout->SegmentNumel(s);
  }
  EXPECT_EQ(segments_numel, layout->padded_numel());

  // Buckets tile [0, padded) and each is a multiple of the world size.
  int64_t at = 0;
  for (const LayoutBucket& b : layout->buckets()) {
    EXPECT_EQ(b.begin, at);
    EXPECT_EQ(b.numel % c.world, 0);
    EXPECT_EQ(b.slice * c.world, b.numel);
    EXPECT_EQ(b.shard_offset, b.begin / c.world);
    at += b.numel;
  }
  EXPECT_EQ(at, layout->padded_numel());

  // Ownership: (rank, shard offset) pairs are a bijection onto W x [0, shard_numel).
  std::vector<std::vector<int>> seen(c.world, std::vector<int>(layout->shard_numel(), 0));
  for (int64_t i = 0; i < layout->padded_numel(); ++i) {
    const int r = layout->OwnerOf(i);
    ASSERT_GE(r, 0);
    ASSERT_LT(r, c.world);
    const int64_t s = layout->ShardOffsetOf(i);
    ASSERT_GE(s, 0);
    ASSERT_LT(s, layout->shard_numel());
    ++seen[r][s];
  }
  for (const auto& rank_seen : seen) {
    for (int count : rank_seen) ASSERT_EQ(count, 1);
  }

  // A reduce-scatter of bucket k gives rank r the slice starting at OwnedBegin(k, r).
  for (int k = 0; k < static_cast<int>(layout->buckets().size()); ++k) {
    const LayoutBucket& b = layout->buckets()[k];
    for (int r = 0; r < c.world; ++r) {
      const int64_t begin = layout->OwnedBegin(k, r);
      EXPECT_EQ(begin, b.begin + r * b.slice);
      EXPECT_EQ(layout->OwnerOf(begin), r);
      EXPECT_EQ(layout->ShardOffsetOf(begin), b.shard_offset);
    }
  }

  // Pieces tile every parameter, agree with OwnerOf/ShardOffsetOf, and name the right bucket.
  for (int p = 0; p < layout->num_params(); ++p) {
    int64_t covered = 0;
    for (const ParamPiece& piece : layout->PiecesOf(p)) {
      EXPECT_EQ(piece.param_offset, covered);
      EXPECT_EQ(piece.flat_begin, layout->param_offset(p) + covered);
      EXPECT_GT(piece.numel, 0);
      for (int64_t e = 0; e < piece.numel; ++e) {
        ASSERT_EQ(layout->OwnerOf(piece.flat_begin + e), piece.rank);
        ASSERT_EQ(layout->ShardOffsetOf(piece.flat_begin + e), piece.shard_offset + e);
      }
      const LayoutBucket& b = layout->buckets()[piece.bucket];
      EXPECT_GE(piece.flat_begin, b.begin);
      EXPECT_LE(piece.flat_begin + piece.numel, b.begin + b.numel);
      covered += piece.numel;
    }
    EXPECT_EQ(covered, layout->param_numel(p));
  }

  // Each bucket lists exactly the parameters that have elements in it.
  for (const LayoutBucket& b : layout->buckets()) {
    for (int p = 0; p < layout->num_params(); ++p) {
      const int64_t lo = layout->param_offset(p);
      const int64_t hi = lo + layout->param_numel(p);
      const bool overlaps = lo < b.begin + b.numel && hi > b.begin;
      if (overlaps) {
        EXPECT_GE(p, b.first_param);
        EXPECT_LT(p, b.end_param);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, ShardLayoutTest,
    ::testing::Values(Case{{10, 7, 3}, 1, 4}, Case{{10, 7, 3}, 2, 4}, Case{{277}, 4, 16},
                      // Buckets smaller than the largest parameter, counts not divisible by W.
                      Case{{5, 100, 0, 1, 33}, 4, 12}, Case{{5, 100, 0, 1, 33}, 3, 1000},
                      Case{{1}, 4, 4}, Case{{64, 64}, 4, 5},
                      // Segments: gaps between parameters, buckets of several sizes.
                      Case{{5, 100, 0, 1, 33}, 4, 12, {1, 3}}, Case{{10, 7, 3}, 2, 4, {1, 2}},
                      Case{{7, 7, 7, 7}, 3, 1000, {2}}, Case{{13, 1, 50}, 4, 8, {2}}));

TEST(ShardLayoutErrors, RejectsBadArguments) {
  EXPECT_FALSE(ShardLayout::Create({4}, 0, 8).ok());
  EXPECT_FALSE(ShardLayout::Create({4}, 2, 0).ok());
  EXPECT_FALSE(ShardLayout::Create({-1}, 2, 8).ok());
  EXPECT_FALSE(ShardLayout::Create({4, 4}, 2, 8, {0}).ok());
  EXPECT_FALSE(ShardLayout::Create({4, 4}, 2, 8, {2}).ok());
  EXPECT_FALSE(ShardLayout::Create({4, 4, 4}, 2, 8, {2, 1}).ok());
}

TEST(ShardLayoutErrors, BucketRoundedUpToWorldMultiple) {
  auto layout = ShardLayout::Create({20}, 4, 5);
  ASSERT_TRUE(layout.ok());
  EXPECT_EQ(layout->buckets()[0].numel, 8);
  EXPECT_EQ(layout->buckets().size(), 3u);
}

}  // namespace
}  // namespace zerotrain::partition

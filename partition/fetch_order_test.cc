// FetchOrder against hand-worked sequences: the record, prefetch lists, reuse distances and the
// fallback when an iteration takes another branch.
#include "partition/fetch_order.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace zerotrain::partition {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

void RunIteration(FetchOrder& order, const std::vector<int>& uses) {
  order.BeginIteration();
  for (int s : uses) order.OnUse(s);
  order.EndIteration();
}

TEST(FetchOrderTest, FirstIterationIsRecordedThenFollowed) {
  FetchOrder order({10, 20, 30, 40});
  order.BeginIteration();
  EXPECT_FALSE(order.following());
  EXPECT_THAT(order.Upcoming(1000), IsEmpty());
  EXPECT_EQ(order.ReuseDistance(0), -1);
  for (int s : {0, 1, 2, 3, 2, 1, 0}) EXPECT_TRUE(order.OnUse(s));
  order.EndIteration();
  EXPECT_THAT(order.recorded(), ElementsAre(0, 1, 2, 3, 2, 1, 0));

  order.BeginIteration();
  EXPECT_TRUE(order.following());
  EXPECT_THAT(order.Upcoming(35), ElementsAre(0, 1));  // 10 + 20 <= 35 < 10 + 20 + 30
  EXPECT_TRUE(order.OnUse(0));
  EXPECT_TRUE(order.OnUse(1));
  // After 1: the record continues 2, 3, 2, 1, 0; 2 and 3 fit in 70, and 2 is listed once.
  EXPECT_THAT(order.Upcoming(70), ElementsAre(2, 3));
  EXPECT_THAT(order.Upcoming(1000), ElementsAre(2, 3, 1, 0));
  // Segment 1 is next used after 2, 3, 2: 30 + 40 + 30 elements.
  EXPECT_EQ(order.ReuseDistance(1), 100);
  EXPECT_EQ(order.ReuseDistance(2), 0);
  EXPECT_TRUE(order.OnUse(2));
  EXPECT_TRUE(order.OnUse(3));
  EXPECT_EQ(order.ReuseDistance(3), -1);  // not used again
  order.EndIteration();
  EXPECT_EQ(order.departures(), 0);
}

TEST(FetchOrderTest, DepartureStopsPrefetchAndBecomesTheRecord) {
  FetchOrder order({1, 1, 1, 1});
  RunIteration(order, {0, 1, 2, 1, 0});
  order.BeginIteration();
  EXPECT_TRUE(order.OnUse(0));
  EXPECT_FALSE(order.OnUse(3));  // another branch
  EXPECT_FALSE(order.following());
  EXPECT_THAT(order.Upcoming(100), IsEmpty());
  EXPECT_EQ(order.ReuseDistance(0), -1);
  EXPECT_TRUE(order.OnUse(2));  // only the first departure reports
  order.EndIteration();
  EXPECT_EQ(order.departures(), 1);
  EXPECT_THAT(order.recorded(), ElementsAre(0, 3, 2));
}

TEST(FetchOrderTest, EarlyStopAlongTheRecordKeepsIt) {
  FetchOrder order({1, 1, 1});
  RunIteration(order, {0, 1, 2, 1, 0});
  RunIteration(order, {0, 1, 2});  // an evaluation forward: no backward
  EXPECT_EQ(order.departures(), 0);
  EXPECT_THAT(order.recorded(), ElementsAre(0, 1, 2, 1, 0));
  RunIteration(order, {});  // an iteration that used nothing records nothing
  EXPECT_THAT(order.recorded(), ElementsAre(0, 1, 2, 1, 0));
}

TEST(FetchOrderTest, AnIterationThatOutgrowsTheRecordReplacesIt) {
  FetchOrder order({1, 1, 1});
  RunIteration(order, {0, 1, 2});  // an evaluation forward came first
  order.BeginIteration();
  for (int s : {0, 1, 2, 1, 0}) EXPECT_TRUE(order.OnUse(s));
  order.EndIteration();
  EXPECT_EQ(order.departures(), 0);
  EXPECT_THAT(order.recorded(), ElementsAre(0, 1, 2, 1, 0));
}

TEST(FetchOrderTest, ZeroBudgetPrefetchesNothing) {
  FetchOrder order({5, 5});
  RunIteration(order, {0, 1});
  order.BeginIteration();
  EXPECT_THAT(order.Upcoming(0), IsEmpty());
  EXPECT_THAT(order.Upcoming(4), IsEmpty());
  EXPECT_THAT(order.Upcoming(5), ElementsAre(0));
}

}  // namespace
}  // namespace zerotrain::partition

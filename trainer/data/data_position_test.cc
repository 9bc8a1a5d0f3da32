// DataPosition in a checkpoint's client state: the round trip, the conversion of an earlier
// version's micro-step sampler_position (checked against the windows the old sampler read), and
// one clear error for each missing or bad value.
#include "trainer/data/data_position.h"

#include <gtest/gtest.h>

#include "trainer/data/sampler.h"

namespace zerotrain::trainer {
namespace {

using ClientState = std::map<std::string, std::string>;

TEST(DataPositionTest, RoundTripsThroughTheClientState) {
  ClientState client = {{"trainer_step", "9"}};
  PutDataPosition({3, 41}, &client);
  EXPECT_EQ(client.at(kDataEpochKey), "3");
  EXPECT_EQ(client.at(kDataSampleKey), "41");
  auto p = DataPositionFromClientState(client, 50, absl::InternalError("not asked"));
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(*p, (DataPosition{3, 41}));
}

// The old sampler: epochs of floor(windows / (W * B)) micro-steps, micro-step s of an epoch reading
// [s * W * B, (s + 1) * W * B) of that epoch's permutation. Its next micro-step after p steps is
// what the converted position must read.
TEST(DataPositionTest, ConvertsAnEarlierVersionsMicroSteps) {
  const int64_t windows = 50, world = 2, batch = 3;  // 8 old micro-steps an epoch, 2 left over
  for (int64_t old_position : {0, 5, 8, 19}) {
    const int64_t epoch = old_position / 8, step_in_epoch = old_position % 8;
    const ClientState client = {{kLegacySamplerPositionKey, std::to_string(old_position)}};
    ASSERT_TRUE(HasOnlyLegacyDataPosition(client));
    auto p = DataPositionFromClientState(client, windows, LegacyDataLayout{world * batch});
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ(*p, (DataPosition{epoch, step_in_epoch * world * batch})) << old_position;
    // The permutation of `epoch` read from its start, as the old sampler read it.
    auto from_epoch_start = DistributedSampler::Create(windows, world, 1, batch, 4);
    auto converted = DistributedSampler::Create(windows, world, 1, batch, 4);
    ASSERT_TRUE(from_epoch_start.ok() && converted.ok());
    ASSERT_TRUE(from_epoch_start->Seek({epoch, 0}).ok());
    for (int64_t s = 0; s < step_in_epoch; ++s) from_epoch_start->NextWindows();
    ASSERT_TRUE(converted->Seek(*p).ok());
    EXPECT_EQ(converted->NextWindows(), from_epoch_start->NextWindows()) << old_position;
  }
}

TEST(DataPositionTest, MissingOrBadValuesNameTheKey) {
  auto message = [](const ClientState& client, const absl::StatusOr<LegacyDataLayout>& legacy) {
    auto p = DataPositionFromClientState(client, 50, legacy);
    EXPECT_FALSE(p.ok());
    return std::string(p.status().message());
  };
  const LegacyDataLayout six{6};
  EXPECT_NE(message({}, six).find("no data_epoch"), std::string::npos);
  EXPECT_NE(message({{kDataEpochKey, "1"}}, six).find("no data_sample"), std::string::npos);
  EXPECT_NE(message({{kDataEpochKey, "x"}, {kDataSampleKey, "1"}}, six).find("\"x\""),
            std::string::npos);
  EXPECT_NE(message({{kDataEpochKey, "0"}, {kDataSampleKey, "50"}}, six).find("50 windows"),
            std::string::npos);
  EXPECT_NE(message({{kLegacySamplerPositionKey, "-1"}}, six).find("sampler_position"),
            std::string::npos);
  EXPECT_NE(message({{kLegacySamplerPositionKey, "3"}}, absl::NotFoundError("no manifest"))
                .find("no manifest"),
            std::string::npos);
  EXPECT_NE(message({{kLegacySamplerPositionKey, "3"}}, LegacyDataLayout{0}).find("0 samples"),
            std::string::npos);
}

}  // namespace
}  // namespace zerotrain::trainer

// WholeModelBufferNotes: a line for each DeepSpeed default that makes a buffer the whole model,
// with the key, the size and the bytes; none for a key set otherwise or a model larger than it.
#include "trainer/bucket_notes.h"

#include "gtest/gtest.h"

namespace zerotrain::trainer {
namespace {

TEST(BucketNotesTest, DeepSpeedDefaultsOverASmallModelAreNamedWithTheirCost) {
  engine::EngineOptions o;
  o.stage = 2;
  const std::vector<std::string> notes = WholeModelBufferNotes(o, 7'250'000);
  ASSERT_EQ(notes.size(), 2u);
  EXPECT_EQ(notes[0],
            "zero_optimization.reduce_bucket_size is DeepSpeed's default 500000000 elements, more "
            "than this model's 7250000 parameters: every gradient is reduced in one bucket, 27.7 "
            "MiB per rank at once; kept as DeepSpeed has it, set it lower (e.g. 906250) to bound "
            "that");
  EXPECT_NE(notes[1].find("zero_optimization.allgather_bucket_size"), std::string::npos);
  o.precision = engine::Precision::kBFloat16;
  EXPECT_NE(WholeModelBufferNotes(o, 7'250'000)[0].find(", 13.8 MiB per rank"), std::string::npos);
}

TEST(BucketNotesTest, Stage3NamesItsPrefetchAndLiveLimits) {
  engine::EngineOptions o;
  o.stage = 3;
  const std::vector<std::string> notes = WholeModelBufferNotes(o, 40'000'000);
  ASSERT_EQ(notes.size(), 3u);
  EXPECT_NE(notes[0].find("reduce_bucket_size"), std::string::npos);
  EXPECT_NE(notes[1].find("stage3_prefetch_bucket_size is DeepSpeed's default 50000000"),
            std::string::npos);
  EXPECT_NE(notes[2].find("stage3_max_live_parameters"), std::string::npos);
  // Larger than the prefetch default: only the others.
  EXPECT_EQ(WholeModelBufferNotes(o, 60'000'000).size(), 2u);
}

TEST(BucketNotesTest, KeysSetByTheUserOrABigModelGiveNoLine) {
  engine::EngineOptions o;
  o.stage = 2;
  o.reduce_bucket_size = 20000;
  o.allgather_bucket_size = 20000;
  EXPECT_TRUE(WholeModelBufferNotes(o, 7'250'000).empty());
  EXPECT_TRUE(WholeModelBufferNotes(engine::EngineOptions{}, 2'000'000'000).empty());
}

}  // namespace
}  // namespace zerotrain::trainer

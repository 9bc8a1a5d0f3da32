// StepScalars: each value under its column's name (samples/s from the batch and the step's
// seconds), the columns in StepColumns' order, and DeepSpeed's tags with the loss scale for fp16
// only.
#include "monitor/step_scalars.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace zerotrain::monitor {
namespace {

std::vector<std::string> Names(const std::vector<Scalar>& scalars) {
  std::vector<std::string> out;
  for (const Scalar& s : scalars) out.push_back(s.name);
  return out;
}

TEST(StepScalars, EveryValueUnderItsColumn) {
  StepValues v;
  v.loss = 2.5;
  v.lr = 3e-4;
  v.loss_scale = 1024;
  v.grad_norm = 0.75;
  v.seconds = 0.25;
  v.train_batch_size = 32;
  const std::vector<Scalar> row = StepScalars(v);
  EXPECT_EQ(Names(row), StepColumns());
  const std::vector<double> want = {2.5, 3e-4, 1024, 0.75, 128, 250};
  ASSERT_EQ(row.size(), want.size());
  for (size_t i = 0; i < row.size(); ++i) EXPECT_DOUBLE_EQ(row[i].value, want[i]) << row[i].name;
}

TEST(StepScalars, DeepSpeedTagsCarryTheLossScaleForFp16Only) {
  StepValues v;
  v.loss = 1.5;
  v.lr = 0.1;
  v.loss_scale = 65536;
  v.seconds = 1;
  v.train_batch_size = 4;
  EXPECT_EQ(Names(DeepSpeedScalars(v)),
            (std::vector<std::string>{"Train/Samples/train_loss", "Train/Samples/lr"}));
  v.fp16 = true;
  const std::vector<Scalar> ds = DeepSpeedScalars(v);
  ASSERT_EQ(Names(ds), (std::vector<std::string>{"Train/Samples/train_loss", "Train/Samples/lr",
                                                 "Train/Samples/loss_scale"}));
  EXPECT_DOUBLE_EQ(ds[0].value, 1.5);
  EXPECT_DOUBLE_EQ(ds[2].value, 65536);
}

}  // namespace
}  // namespace zerotrain::monitor

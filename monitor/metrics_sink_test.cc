// MetricsSink: both monitors on, the same steps land in the CSV and the event file; option
// errors name the field.
#include "monitor/metrics_sink.h"

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "monitor/event_file_reader.h"

namespace zerotrain::monitor {
namespace {

std::string TestDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return std::string(tmp ? tmp : "/tmp") + "/" + name;
}

TEST(MetricsSinkTest, WritesCsvAndTensorBoard) {
  MetricsOptions o;
  o.csv = true;
  o.csv_output_path = TestDir("sink/csv");
  o.tensorboard = true;
  o.tensorboard_output_path = TestDir("sink/tb");
  o.job_name = "run1";
  auto sink = MetricsSink::Create(o);
  ASSERT_TRUE(sink.ok()) << sink.status();
  EXPECT_EQ((*sink)->csv_path(), o.csv_output_path + "/run1/metrics.csv");
  EXPECT_EQ((*sink)->tensorboard_path().rfind(o.tensorboard_output_path + "/run1/", 0), 0u);
  for (int step = 1; step <= 3; ++step) {
    const std::vector<Scalar> s = {{names::kLoss, 4.0 / step}, {names::kMsPerStep, 10.0 * step}};
    ASSERT_TRUE((*sink)->Write(step, s).ok());
  }
  std::ifstream csv((*sink)->csv_path());
  int lines = 0;
  for (std::string line; std::getline(csv, line);) ++lines;
  EXPECT_EQ(lines, 4);
  auto events = ReadEventFile((*sink)->tensorboard_path());
  ASSERT_TRUE(events.ok()) << events.status();
  ASSERT_EQ(events->size(), 4u);
  EXPECT_EQ((*events)[3].step(), 3);
  EXPECT_EQ((*events)[3].summary().value(0).tag(), "loss");
  EXPECT_FLOAT_EQ((*events)[3].summary().value(0).simple_value(), 4.0f / 3);
  EXPECT_FLOAT_EQ((*events)[3].summary().value(1).simple_value(), 30.0f);
}

TEST(MetricsSinkTest, DeepSpeedTagsGoToTensorBoardOnly) {
  MetricsOptions o;
  o.csv = true;
  o.csv_output_path = TestDir("ds_tags/csv");
  o.tensorboard = true;
  o.tensorboard_output_path = TestDir("ds_tags/tb");
  auto sink = MetricsSink::Create(o, {names::kLoss});
  ASSERT_TRUE(sink.ok()) << sink.status();
  ASSERT_TRUE((*sink)->Write(2, std::vector<Scalar>{{names::kLoss, 3.0}}).ok());
  // Indexed by samples: step 2 of 16 samples per step.
  ASSERT_TRUE(
      (*sink)->WriteTensorBoardOnly(32, std::vector<Scalar>{{names::kDsTrainLoss, 3.0}}).ok());
  std::ifstream csv((*sink)->csv_path());
  std::string text((std::istreambuf_iterator<char>(csv)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text.find("Train/"), std::string::npos) << text;
  auto events = ReadEventFile((*sink)->tensorboard_path());
  ASSERT_TRUE(events.ok()) << events.status();
  ASSERT_EQ(events->size(), 3u);  // the file version, then two
  EXPECT_EQ((*events)[2].step(), 32);
  EXPECT_EQ((*events)[2].summary().value(0).tag(), "Train/Samples/train_loss");
}

TEST(MetricsSinkTest, BothOffAcceptsEverything) {
  auto sink = MetricsSink::Create(MetricsOptions{});
  ASSERT_TRUE(sink.ok());
  const std::vector<Scalar> s = {{"loss", 1}};
  EXPECT_TRUE((*sink)->Write(1, s).ok());
  EXPECT_EQ((*sink)->csv_path(), "");
}

TEST(MetricsSinkTest, BadOptionsNameTheField) {
  MetricsOptions o;
  o.csv = true;
  auto s = MetricsSink::Create(o);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("csv_monitor.output_path"), std::string::npos);
  o.csv_output_path = TestDir("x");
  o.job_name = "../up";
  s = MetricsSink::Create(o);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("job_name"), std::string::npos);
}

}  // namespace
}  // namespace zerotrain::monitor

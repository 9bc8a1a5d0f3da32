// CSV writer: header and rows read back as text, missing cells, flushing before close, a
// resumed run with the same or different columns, and errors naming the path or metric.
#include "monitor/csv_writer.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/str_split.h"
#include "gtest/gtest.h"

namespace zerotrain::monitor {
namespace {

std::string TestDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return std::string(tmp ? tmp : "/tmp") + "/" + name;
}

std::vector<std::string> Lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

TEST(CsvWriterTest, HeaderRowsAndFlushPerRow) {
  auto w = CsvWriter::Open(TestDir("csv1/a/b"));
  ASSERT_TRUE(w.ok()) << w.status();
  const std::vector<Scalar> first = {{"loss", 2.5}, {"lr", 0.001}};
  ASSERT_TRUE((*w)->Write(1, first, 100.0).ok());
  const std::vector<Scalar> second = {{"loss", 1.25}};  // lr left out: empty cell
  ASSERT_TRUE((*w)->Write(2, second, 101.5).ok());
  // Still open: the rows must already be on disk.
  const auto lines = Lines((*w)->path());
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0], "step,wall_time,loss,lr");
  const std::vector<std::string> row1 = absl::StrSplit(lines[1], ',');
  ASSERT_EQ(row1.size(), 4u);
  EXPECT_EQ(row1[0], "1");
  EXPECT_DOUBLE_EQ(std::stod(row1[1]), 100.0);
  EXPECT_DOUBLE_EQ(std::stod(row1[2]), 2.5);
  EXPECT_DOUBLE_EQ(std::stod(row1[3]), 0.001);
  EXPECT_EQ(lines[2].substr(lines[2].rfind(',')), ",");
}

TEST(CsvWriterTest, NewColumnAfterTheFirstRowIsAnError) {
  auto w = CsvWriter::Open(TestDir("csv2"));
  ASSERT_TRUE(w.ok());
  const std::vector<Scalar> first = {{"loss", 1}};
  ASSERT_TRUE((*w)->Write(1, first).ok());
  const std::vector<Scalar> second = {{"loss", 1}, {"grad_norm", 3}};
  auto s = (*w)->Write(2, second);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("grad_norm"), std::string::npos) << s;
}

TEST(CsvWriterTest, DeclaredColumnsLetRowsHoldAnySubset) {
  const std::string dir = TestDir("csv_declared");
  auto w = CsvWriter::Open(dir);
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE((*w)->DeclareColumns({"loss", "eval_loss"}).ok());
  const std::vector<Scalar> eval = {{"eval_loss", 5.5}};
  const std::vector<Scalar> train = {{"loss", 4.25}};
  ASSERT_TRUE((*w)->Write(0, eval, 10.0).ok());
  ASSERT_TRUE((*w)->Write(1, train, 11.0).ok());
  EXPECT_FALSE((*w)->DeclareColumns({"lr"}).ok());  // fixed already
  const std::vector<std::string> lines = Lines(dir + "/metrics.csv");
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0], "step,wall_time,loss,eval_loss");
  EXPECT_EQ(lines[1], "0,10.000,,5.5");
  EXPECT_EQ(lines[2], "1,11.000,4.25,");
}

TEST(CsvWriterTest, ResumeAppendsWithSameColumnsAndRefusesOthers) {
  const std::string dir = TestDir("csv3");
  const std::vector<Scalar> row = {{"loss", 1}};
  {
    auto w = CsvWriter::Open(dir);
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->Write(1, row).ok());
  }
  {
    auto w = CsvWriter::Open(dir, "metrics.csv", /*append=*/true);
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->Write(2, row).ok());
  }
  EXPECT_EQ(Lines(dir + "/metrics.csv").size(), 3u);  // one header, two rows
  auto w = CsvWriter::Open(dir, "metrics.csv", /*append=*/true);
  ASSERT_TRUE(w.ok());
  const std::vector<Scalar> other = {{"lr", 1}};
  auto s = (*w)->Write(3, other);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find(dir + "/metrics.csv"), std::string::npos) << s;
}

// A run saved at step 2 and reached step 4 (and half a row) before it stopped; the run resumed
// from step 2 writes steps 3.. again, each once.
TEST(CsvWriterTest, AResumeDropsTheRowsAfterItsStepSoNoneRepeats) {
  const std::string dir = TestDir("csv_resume");
  const std::vector<Scalar> row = {{"loss", 1}};
  const std::vector<Scalar> eval = {{"eval_loss", 2}};
  {
    auto w = CsvWriter::Open(dir);
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->DeclareColumns({"loss", "eval_loss"}).ok());
    for (int step = 1; step <= 4; ++step) ASSERT_TRUE((*w)->Write(step, row, step).ok());
    ASSERT_TRUE((*w)->Write(2, eval, 2.5).ok());
  }
  std::ofstream(dir + "/metrics.csv", std::ios::app) << "5,5.0";  // cut by a kill
  auto w = CsvWriter::Open(dir, "metrics.csv", /*append=*/true);
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE((*w)->DeclareColumns({"loss", "eval_loss"}).ok());
  ASSERT_TRUE((*w)->DropRowsAfter(2).ok());
  for (int step = 3; step <= 5; ++step) ASSERT_TRUE((*w)->Write(step, row, step).ok());
  const std::vector<std::string> want = {"step,wall_time,loss,eval_loss",
                                         "1,1.000,1,",
                                         "2,2.000,1,",
                                         "2,2.500,,2",
                                         "3,3.000,1,",
                                         "4,4.000,1,",
                                         "5,5.000,1,"};
  EXPECT_EQ(Lines(dir + "/metrics.csv"), want);
  EXPECT_FALSE(std::ifstream(dir + "/metrics.csv.tmp").good());
}

TEST(CsvWriterTest, ANewRunReplacesTheFile) {
  const std::string dir = TestDir("csv_new_run");
  const std::vector<Scalar> old_row = {{"eval_loss", 1}};
  const std::vector<Scalar> new_row = {{"loss", 2}};
  {
    auto w = CsvWriter::Open(dir);
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->Write(1, old_row).ok());
  }
  auto w = CsvWriter::Open(dir);
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE((*w)->Write(1, new_row).ok()) << "other columns than the previous run's";
  const std::vector<std::string> lines = Lines(dir + "/metrics.csv");
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0], "step,wall_time,loss");
}

// A run that fails before its first row leaves no file (not even a header), and an earlier
// run's file untouched.
TEST(CsvWriterTest, NoFileUntilTheFirstRow) {
  const std::string dir = TestDir("csv_lazy");
  {
    auto w = CsvWriter::Open(dir);
    ASSERT_TRUE(w.ok()) << w.status();
    ASSERT_TRUE((*w)->DeclareColumns({"loss", "lr"}).ok());
  }
  EXPECT_FALSE(std::ifstream(dir + "/metrics.csv").good());
  {
    auto w = CsvWriter::Open(dir);
    ASSERT_TRUE(w.ok());
    const std::vector<Scalar> row = {{"loss", 2}};
    ASSERT_TRUE((*w)->Write(1, row).ok());
  }
  {
    auto w = CsvWriter::Open(dir);  // a new run that fails before its first row
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->DeclareColumns({"loss"}).ok());
  }
  const std::vector<std::string> lines = Lines(dir + "/metrics.csv");
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0], "step,wall_time,loss");
}

TEST(CsvWriterTest, UncreatableDirectoryNamesThePath) {
  const std::string file = TestDir("csv_plain_file");
  std::ofstream(file) << "x";
  auto w = CsvWriter::Open(file + "/run");
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find(file), std::string::npos) << w.status();
  EXPECT_NE(w.status().message().find("csv_output_path"), std::string::npos) << w.status();
}

TEST(CsvWriterTest, FieldQuoting) {
  EXPECT_EQ(CsvField("loss"), "loss");
  EXPECT_EQ(CsvField("a,b"), "\"a,b\"");
  EXPECT_EQ(CsvField("say \"hi\""), "\"say \"\"hi\"\"\"");
}

}  // namespace
}  // namespace zerotrain::monitor

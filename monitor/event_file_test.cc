// TensorBoard event files: write scalars, read them back through the framing checks, check the
// wire bytes against TensorBoard's field numbers encoded by hand, and corrupt bytes to see the
// reader refuse them.
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "gtest/gtest.h"
#include "monitor/event_file_reader.h"
#include "monitor/event_file_writer.h"
#include "monitor/masked_crc.h"

namespace zerotrain::monitor {
namespace {

std::string TestDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return std::string(tmp ? tmp : "/tmp") + "/" + name;
}

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(EventFileTest, ScalarsRoundTrip) {
  auto writer = EventFileWriter::Open(TestDir("roundtrip/sub"));
  ASSERT_TRUE(writer.ok()) << writer.status();
  const std::string base = std::filesystem::path((*writer)->path()).filename();
  EXPECT_EQ(base.rfind("events.out.tfevents.", 0), 0u) << base;
  char host[256] = {};
  ASSERT_EQ(gethostname(host, sizeof(host) - 1), 0);
  EXPECT_NE(base.find("." + std::string(host) + "."), std::string::npos) << base;

  const std::vector<std::vector<Scalar>> steps = {
      {{"loss", 2.5}, {"lr", 1e-4}}, {{"loss", 2.25}, {"lr", 2e-4}}, {{"loss", 1.75}}};
  for (size_t i = 0; i < steps.size(); ++i) {
    ASSERT_TRUE((*writer)->WriteScalars(10 * (i + 1), steps[i], 1000.0 + i).ok());
  }
  auto events = ReadEventFile((*writer)->path());
  ASSERT_TRUE(events.ok()) << events.status();
  ASSERT_EQ(events->size(), steps.size() + 1);
  EXPECT_EQ((*events)[0].file_version(), "brain.Event:2");
  for (size_t i = 0; i < steps.size(); ++i) {
    const tb::Event& e = (*events)[i + 1];
    EXPECT_EQ(e.step(), static_cast<int64_t>(10 * (i + 1)));
    EXPECT_DOUBLE_EQ(e.wall_time(), 1000.0 + i);
    ASSERT_EQ(e.summary().value_size(), static_cast<int>(steps[i].size()));
    for (size_t j = 0; j < steps[i].size(); ++j) {
      EXPECT_EQ(e.summary().value(j).tag(), steps[i][j].name);
      EXPECT_EQ(e.summary().value(j).simple_value(), static_cast<float>(steps[i][j].value));
    }
  }
}

TEST(EventFileTest, TwoWritersInOneDirectoryDoNotCollide) {
  auto a = EventFileWriter::Open(TestDir("two"));
  auto b = EventFileWriter::Open(TestDir("two"));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE((*a)->path(), (*b)->path());
}

// The record and Event bytes built by hand from TensorBoard's definitions: Event{wall_time=1
// (fixed64), step=2 (varint), summary=5 (bytes)}, Summary{value=1}, Value{tag=1, simple_value=2
// (fixed32)}; framing with the masked CRC computed by the bit-at-a-time reference below.
uint32_t BitwiseCrc32c(const std::string& s) {
  uint32_t crc = 0xFFFFFFFFu;
  for (unsigned char c : s) {
    crc ^= c;
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
  }
  return ~crc;
}

std::string Le(uint64_t v, int n) {
  std::string s;
  for (int i = 0; i < n; ++i) s.push_back(static_cast<char>(v >> (8 * i)));
  return s;
}

TEST(EventFileTest, WireBytesMatchTensorBoardLayout) {
  const double wall = 1.5;
  const float value = 0.25f;
  uint64_t wall_bits;
  uint32_t value_bits;
  std::memcpy(&wall_bits, &wall, 8);
  std::memcpy(&value_bits, &value, 4);
  const std::string value_msg = std::string("\x0a\x04loss", 6) + "\x15" + Le(value_bits, 4);
  const std::string summary_msg = "\x0a" + std::string(1, char(value_msg.size())) + value_msg;
  const std::string event = "\x09" + Le(wall_bits, 8) + "\x10\x07" + "\x2a" +
                            std::string(1, char(summary_msg.size())) + summary_msg;
  auto rotate_add = [](uint32_t c) { return ((c >> 15) | (c << 17)) + 0xa282ead8u; };
  const std::string want = Le(event.size(), 8) +
                           Le(rotate_add(BitwiseCrc32c(Le(event.size(), 8))), 4) + event +
                           Le(rotate_add(BitwiseCrc32c(event)), 4);

  auto writer = EventFileWriter::Open(TestDir("wire"));
  ASSERT_TRUE(writer.ok()) << writer.status();
  const std::vector<Scalar> scalars = {{"loss", 0.25}};
  ASSERT_TRUE((*writer)->WriteScalars(7, scalars, wall).ok());
  const std::string bytes = ReadBytes((*writer)->path());
  ASSERT_GE(bytes.size(), want.size());
  EXPECT_EQ(bytes.substr(bytes.size() - want.size()), want);
}

TEST(EventFileTest, ReaderDetectsEveryCorruptedByte) {
  auto writer = EventFileWriter::Open(TestDir("corrupt"));
  ASSERT_TRUE(writer.ok()) << writer.status();
  const std::vector<Scalar> scalars = {{"loss", 3.0}, {"lr", 0.5}};
  ASSERT_TRUE((*writer)->WriteScalars(1, scalars, 5.0).ok());
  const std::string good = ReadBytes((*writer)->path());
  ASSERT_TRUE(ParseEventRecords(good, "good").ok());
  // Every single-byte change anywhere in the file (length, its CRC, data, data CRC) is refused.
  for (size_t i = 0; i < good.size(); ++i) {
    std::string bad = good;
    bad[i] = static_cast<char>(bad[i] ^ 0x20);
    auto parsed = ParseEventRecords(bad, "bad");
    ASSERT_FALSE(parsed.ok()) << "flipped byte " << i << " was not detected";
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kDataLoss);
  }
  auto truncated = ParseEventRecords(good.substr(0, good.size() - 1), "short");
  ASSERT_FALSE(truncated.ok());
  EXPECT_NE(truncated.status().message().find("short"), std::string::npos);
}

TEST(EventFileTest, UnwritableDirectoryIsAnErrorNamingIt) {
  const std::string file = TestDir("plain_file");
  std::ofstream(file) << "x";
  auto writer = EventFileWriter::Open(file + "/sub");
  ASSERT_FALSE(writer.ok());
  EXPECT_NE(writer.status().message().find(file), std::string::npos) << writer.status();
}

}  // namespace
}  // namespace zerotrain::monitor

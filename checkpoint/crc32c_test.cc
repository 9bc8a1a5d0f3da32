// CRC32C, both the hardware and the table path, against the standard check value and a
// bit-at-a-time reference written here from the definition.
#include "checkpoint/crc32c.h"

#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace zerotrain::checkpoint {
namespace {

// One bit at a time, straight from the definition: reflected input/output, init and xor-out ~0.
uint32_t BitwiseCrc32c(const uint8_t* p, size_t n) {
  uint32_t crc = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) {
    crc ^= p[i];
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
  }
  return crc ^ 0xFFFFFFFFu;
}

TEST(Crc32cTest, StandardCheckValue) {
  const std::string s = "123456789";
  EXPECT_EQ(Crc32c(s.data(), s.size()), 0xE3069283u);
  EXPECT_EQ(Crc32cPortable(0, s.data(), s.size()), 0xE3069283u);
  EXPECT_EQ(Crc32c("", 0), 0u);
}

TEST(Crc32cTest, MatchesBitwiseReferenceOnRandomData) {
  std::mt19937 rng(7);
  std::vector<uint8_t> buf(4099);
  for (auto& b : buf) b = static_cast<uint8_t>(rng());
  // Every length up to 70 covers the 8-byte loop and its tails; offsets cover misalignment.
  for (size_t offset = 0; offset < 8; ++offset) {
    for (size_t n = 0; n < 70; ++n) {
      const uint32_t want = BitwiseCrc32c(buf.data() + offset, n);
      ASSERT_EQ(Crc32c(buf.data() + offset, n), want) << "offset " << offset << " n " << n;
      ASSERT_EQ(Crc32cPortable(0, buf.data() + offset, n), want)
          << "offset " << offset << " n " << n;
    }
  }
  EXPECT_EQ(Crc32c(buf.data(), buf.size()), BitwiseCrc32c(buf.data(), buf.size()));
  SUCCEED() << "hardware path: " << Crc32cUsesHardware();
}

TEST(Crc32cTest, ContinuationEqualsOneShot) {
  const std::string s = "the quick brown fox jumps over the lazy dog";
  const uint32_t whole = Crc32c(s.data(), s.size());
  const uint32_t first = Crc32c(s.data(), 10);
  EXPECT_EQ(Crc32cExtend(first, s.data() + 10, s.size() - 10), whole);
  EXPECT_EQ(Crc32cPortable(Crc32cPortable(0, s.data(), 10), s.data() + 10, s.size() - 10), whole);
}

TEST(Crc32cTest, ConcatEqualsTheCrcOfBothParts) {
  std::mt19937 rng(11);
  std::vector<uint8_t> buf(3 * 4096 + 17);
  for (auto& b : buf) b = static_cast<uint8_t>(rng());
  for (size_t split : {size_t{0}, size_t{1}, size_t{7}, size_t{8}, size_t{4096}, size_t{5000},
                       buf.size() - 1, buf.size()}) {
    const uint32_t a = Crc32c(buf.data(), split);
    const uint32_t b = Crc32c(buf.data() + split, buf.size() - split);
    EXPECT_EQ(Crc32cConcat(a, b, buf.size() - split), BitwiseCrc32c(buf.data(), buf.size()))
        << "split " << split;
  }
  const Crc32cShift shift(buf.size() - 4096);
  EXPECT_EQ(shift.Concat(Crc32c(buf.data(), 4096), Crc32c(buf.data() + 4096, buf.size() - 4096)),
            Crc32c(buf.data(), buf.size()));
  // Three parts, folded left to right as a streamed file is.
  const uint32_t ab = Crc32cConcat(Crc32c(buf.data(), 100), Crc32c(buf.data() + 100, 900), 900);
  EXPECT_EQ(Crc32cConcat(ab, Crc32c(buf.data() + 1000, buf.size() - 1000), buf.size() - 1000),
            Crc32c(buf.data(), buf.size()));
}

}  // namespace
}  // namespace zerotrain::checkpoint

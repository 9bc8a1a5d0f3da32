// Memory readings: the parser on a fixed status text, the live peak against getrusage (an
// independent kernel counter), and the peak rising when we touch a large buffer.
#include "monitor/memory_stats.h"

#include <sys/resource.h>

#include <cstdlib>
#include <cstring>

#include "gtest/gtest.h"

namespace zerotrain::monitor {
namespace {

TEST(MemoryStatsTest, ParsesProcStatusText) {
  const std::string text =
      "Name:\tfoo\nVmPeak:\t  999 kB\nVmHWM:\t    2048 kB\nVmRSS:\t    1024 kB\nThreads:\t1\n";
  auto usage = ParseProcStatus(text);
  ASSERT_TRUE(usage.ok()) << usage.status();
  EXPECT_EQ(usage->rss_bytes, 1024 * 1024);
  EXPECT_EQ(usage->peak_rss_bytes, 2048 * 1024);
  EXPECT_FALSE(ParseProcStatus("Name:\tfoo\n").ok());
}

TEST(MemoryStatsTest, PeakAgreesWithGetrusageAndRisesWithAllocation) {
  auto before = ReadMemoryUsage();
  ASSERT_TRUE(before.ok()) << before.status();
  constexpr size_t kBytes = 96 << 20;
  char* buf = static_cast<char*>(std::malloc(kBytes));
  ASSERT_NE(buf, nullptr);
  std::memset(buf, 1, kBytes);  // touch every page so it becomes resident
  auto after = ReadMemoryUsage();
  ASSERT_TRUE(after.ok()) << after.status();
  volatile char sink = buf[kBytes / 2];
  (void)sink;
  std::free(buf);

  EXPECT_GE(after->peak_rss_bytes - before->peak_rss_bytes, static_cast<int64_t>(kBytes * 0.9));
  EXPECT_GE(after->rss_bytes, before->rss_bytes + static_cast<int64_t>(kBytes * 0.9));
  EXPECT_LE(after->rss_bytes, after->peak_rss_bytes);

  struct rusage ru {};
  ASSERT_EQ(getrusage(RUSAGE_SELF, &ru), 0);
  const int64_t rusage_peak = static_cast<int64_t>(ru.ru_maxrss) * 1024;
  // Both are the kernel's high-water mark of this process, sampled moments apart.
  EXPECT_NEAR(static_cast<double>(rusage_peak), static_cast<double>(after->peak_rss_bytes),
              8.0 * kMiB);
}

TEST(MemoryStatsTest, SummaryHasRssAndExtraLines) {
  MemoryUsage u;
  u.rss_bytes = 3 * (1 << 20);
  u.peak_rss_bytes = 5 * (1 << 20);
  const std::string s = MemorySummary(u, {"cuda allocated 1.0 GiB"});
  EXPECT_NE(s.find("now 3.0 MiB"), std::string::npos) << s;
  EXPECT_NE(s.find("peak 5.0 MiB"), std::string::npos) << s;
  EXPECT_NE(s.find("cuda allocated 1.0 GiB\n"), std::string::npos) << s;
}

}  // namespace
}  // namespace zerotrain::monitor

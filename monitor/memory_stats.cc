// /proc/self/status parsing, with getrusage as the portable fallback for the peak.
#include "monitor/memory_stats.h"

#include <sys/resource.h>

#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace zerotrain::monitor {
namespace {

// "VmHWM:\t  123456 kB" -> 123456 * 1024.
bool ParseKbField(absl::string_view line, absl::string_view key, int64_t* bytes) {
  if (!absl::ConsumePrefix(&line, key)) return false;
  line = absl::StripAsciiWhitespace(line);
  if (!absl::ConsumeSuffix(&line, "kB")) return false;
  int64_t kb = 0;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(line), &kb)) return false;
  *bytes = kb * 1024;
  return true;
}

}  // namespace

absl::StatusOr<MemoryUsage> ParseProcStatus(const std::string& status_text) {
  MemoryUsage usage;
  bool have_rss = false, have_peak = false;
  for (absl::string_view line : absl::StrSplit(status_text, '\n')) {
    have_rss |= ParseKbField(line, "VmRSS:", &usage.rss_bytes);
    have_peak |= ParseKbField(line, "VmHWM:", &usage.peak_rss_bytes);
  }
  if (!have_rss || !have_peak) {
    return absl::NotFoundError("/proc/self/status: no VmRSS/VmHWM lines");
  }
  return usage;
}

absl::StatusOr<MemoryUsage> ReadMemoryUsage() {
  std::ifstream in("/proc/self/status");
  if (in) {
    std::ostringstream text;
    text << in.rdbuf();
    auto parsed = ParseProcStatus(text.str());
    if (parsed.ok()) return parsed;
  }
  struct rusage ru {};
  if (getrusage(RUSAGE_SELF, &ru) != 0) {
    return absl::UnavailableError("neither /proc/self/status nor getrusage gave memory usage");
  }
  MemoryUsage usage;
  usage.peak_rss_bytes = static_cast<int64_t>(ru.ru_maxrss) * 1024;  // KiB on Linux
  return usage;
}

absl::Status ResetPeakRss() {
  std::ofstream out("/proc/self/clear_refs");
  if (out) out << "5";
  if (out) out.close();  // the kernel acts on the write, which the close flushes
  if (!out) {
    return absl::UnavailableError(
        "/proc/self/clear_refs: cannot reset the RSS high-water mark (Linux 4.0 or later)");
  }
  return absl::OkStatus();
}

std::string MemorySummary(const MemoryUsage& usage, const std::vector<std::string>& extra_lines) {
  std::string out = absl::StrFormat("host RSS now %.1f MiB, peak %.1f MiB\n",
                                    usage.rss_bytes / kMiB, usage.peak_rss_bytes / kMiB);
  for (const std::string& line : extra_lines) absl::StrAppend(&out, line, "\n");
  return out;
}

}  // namespace zerotrain::monitor

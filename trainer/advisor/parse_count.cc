// ParseCount (see parse_count.h).
#include "trainer/advisor/parse_count.h"

#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace zerotrain::advisor {

absl::StatusOr<int64_t> ParseCount(const std::string& flag, const std::string& text) {
  std::string number = text;
  double scale = 1;
  if (!number.empty()) {
    switch (absl::ascii_toupper(number.back())) {
      case 'K':
        scale = 1e3;
        break;
      case 'M':
        scale = 1e6;
        break;
      case 'B':
      case 'G':
        scale = 1e9;
        break;
      case 'T':
        scale = 1e12;
        break;
      default:
        break;
    }
    if (scale != 1) number.pop_back();
  }
  double v = 0;
  if (!absl::SimpleAtod(number, &v) || !std::isfinite(v) || v < 0 || v * scale > 9e18) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, ": '", text, "' is not a count >= 0 (e.g. 125M, 1.3B, 13e9)"));
  }
  return static_cast<int64_t>(std::llround(v * scale));
}

}  // namespace zerotrain::advisor

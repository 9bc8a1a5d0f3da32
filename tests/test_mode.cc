// FullTestMode: reads ZEROTRAIN_TEST_MODE once per process.
#include "tests/test_mode.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace zerotrain::testing {

bool FullTestMode() {
  static const bool full = [] {
    const char* mode = std::getenv("ZEROTRAIN_TEST_MODE");
    if (mode == nullptr || *mode == '\0' || std::strcmp(mode, "short") == 0) return false;
    if (std::strcmp(mode, "full") == 0) return true;
    std::fprintf(stderr, "ZEROTRAIN_TEST_MODE = \"%s\": expected \"short\" or \"full\"\n", mode);
    std::exit(2);
  }();
  return full;
}

}  // namespace zerotrain::testing

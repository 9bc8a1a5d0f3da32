// Conversions shared by the backends.
#include "comm/backend.h"

#include <c10/util/Exception.h>

#include "absl/strings/match.h"

namespace zerotrain::comm {

absl::Status StatusFromException(const std::exception& e) {
  std::string msg;
  if (const auto* c10_error = dynamic_cast<const c10::Error*>(&e)) {
    msg = c10_error->what_without_backtrace();
  } else {
    msg = e.what();
  }
  // Gloo and c10d phrase timeouts in several ways ("Timed out", "timed out", "Timeout").
  if (absl::StrContains(msg, "imed out") || absl::StrContains(msg, "imeout")) {
    return absl::DeadlineExceededError(msg);
  }
  return absl::AbortedError(msg);
}

}  // namespace zerotrain::comm

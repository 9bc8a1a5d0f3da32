// How a Status crosses into Python: one exception whose type says what went wrong (ValueError for
// bad input, NotImplementedError for what zerotrain does not support, TimeoutError for a rank that
// did not answer, RuntimeError otherwise) and whose message is the Status's own.
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace zerotrain::python {

// Throws the Python exception for `status`, which must not be OK.
[[noreturn]] void RaiseStatus(const absl::Status& status);

inline void Check(const absl::Status& status) {
  if (!status.ok()) RaiseStatus(status);
}

template <typename T>
T Check(absl::StatusOr<T> value) {
  if (!value.ok()) RaiseStatus(value.status());
  return *std::move(value);
}

}  // namespace zerotrain::python

// Status propagation macros: Debian 12's Abseil (20220623) has none.
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

#define ZT_STATUS_CONCAT_INNER(a, b) a##b
#define ZT_STATUS_CONCAT(a, b) ZT_STATUS_CONCAT_INNER(a, b)

// Returns from the enclosing function if `expr` (an absl::Status) is not OK.
#define ZT_RETURN_IF_ERROR(expr)             \
  do {                                       \
    ::absl::Status zt_status_ = (expr);      \
    if (!zt_status_.ok()) return zt_status_; \
  } while (0)

// `lhs` = the value of `rexpr` (an absl::StatusOr<T>), or returns its error.
#define ZT_ASSIGN_OR_RETURN(lhs, rexpr) \
  ZT_ASSIGN_OR_RETURN_IMPL(ZT_STATUS_CONCAT(zt_statusor_, __LINE__), lhs, rexpr)

#define ZT_ASSIGN_OR_RETURN_IMPL(statusor, lhs, rexpr) \
  auto statusor = (rexpr);                             \
  if (!statusor.ok()) return statusor.status();        \
  lhs = std::move(statusor).value()

namespace zerotrain {

// `s` with `prefix` put in front of its message, its code kept (which op, rank, file); OK stays
// OK. The one way boundaries add context to an error from below.
inline absl::Status WithPrefix(const absl::Status& s, absl::string_view prefix) {
  if (s.ok()) return s;
  return absl::Status(s.code(), absl::StrCat(prefix, s.message()));
}

}  // namespace zerotrain

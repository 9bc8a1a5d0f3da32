// Test-only: joins the process group described by the rendezvous environment SpawnRanks sets, and
// times an op that is expected to fail.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "comm/process_group.h"
#include "comm/rendezvous.h"

namespace zerotrain::comm {

inline absl::StatusOr<std::unique_ptr<ProcessGroup>> JoinGroupFromEnv(
    const GroupOptions& options = {}) {
  auto info = RendezvousFromEnv();
  if (!info.ok()) return info.status();
  return ProcessGroup::Create(*info, options);
}

// Runs `op` and reports its error message and how long it took, as "<seconds>|<message>".
inline absl::StatusOr<std::string> TimedFailure(const std::function<absl::Status()>& op) {
  const auto start = std::chrono::steady_clock::now();
  absl::Status s = op();
  const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
  if (s.ok()) return absl::InternalError("the op succeeded but was expected to fail");
  return absl::StrCat(took.count(), "|", s.ToString());
}

}  // namespace zerotrain::comm

// Test-only: joins the process group described by the rendezvous environment SpawnRanks sets.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "comm/process_group.h"
#include "comm/rendezvous.h"

namespace zerotrain::comm {

inline absl::StatusOr<std::unique_ptr<ProcessGroup>> JoinGroupFromEnv(
    const GroupOptions& options = {}) {
  auto info = RendezvousFromEnv();
  if (!info.ok()) return info.status();
  return ProcessGroup::Create(*info, options);
}

}  // namespace zerotrain::comm

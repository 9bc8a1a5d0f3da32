// A connected c10d::ProcessGroupGloo, shared by the Gloo backend and the call check.
#pragma once

#include <c10/util/intrusive_ptr.h>

#include "absl/status/statusor.h"
#include "comm/backend.h"

namespace c10d {
class Backend;
}  // namespace c10d

namespace zerotrain::comm {

// Rendezvous over ctx.store and a full mesh of TCP pairs; bounded by ctx.timeout.
absl::StatusOr<c10::intrusive_ptr<c10d::Backend>> ConnectGloo(const BackendContext& ctx);

}  // namespace zerotrain::comm

// Backend names (backend_kind.h).
#include "comm/backend_kind.h"

#include "absl/strings/match.h"

namespace zerotrain::comm {

const char* BackendName(BackendKind backend) {
  switch (backend) {
    case BackendKind::kNccl:
      return "nccl";
    case BackendKind::kShm:
      return "shm";
    case BackendKind::kGloo:
      break;
  }
  return "gloo";
}

std::optional<BackendKind> BackendNamed(absl::string_view name) {
  for (BackendKind b : kAllBackends) {
    if (absl::EqualsIgnoreCase(name, BackendName(b))) return b;
  }
  return std::nullopt;
}

}  // namespace zerotrain::comm

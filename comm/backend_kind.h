// The transports a ProcessGroup can run on, with their names as configs spell them. Kept apart
// from process_group.h (and LibTorch) so that a config reader can name a backend cheaply.
#pragma once

#include <optional>

#include "absl/strings/string_view.h"

namespace zerotrain::comm {

enum class BackendKind { kGloo, kNccl, kShm };
inline constexpr BackendKind kAllBackends[] = {BackendKind::kGloo, BackendKind::kNccl,
                                               BackendKind::kShm};

const char* BackendName(BackendKind backend);  // "gloo", "nccl", "shm"
// The backend named `name` (any case), or nullopt.
std::optional<BackendKind> BackendNamed(absl::string_view name);

}  // namespace zerotrain::comm

// Stands in for nccl_backend.cc in builds without --config=cuda.
#include "comm/backend.h"

namespace zerotrain::comm {

absl::StatusOr<std::unique_ptr<Backend>> MakeNcclBackend(const BackendContext&) {
  return absl::UnimplementedError(
      "nccl: zerotrain was built without CUDA; rebuild with `bazel build --config=cuda`");
}

}  // namespace zerotrain::comm

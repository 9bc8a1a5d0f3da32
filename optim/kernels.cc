// Maps a resolved SIMD path to its kernel table.
#include "optim/kernels.h"

namespace zerotrain::optim::internal {

const KernelTable& KernelTableFor(SimdPath path) {
  switch (path) {
    case SimdPath::kAvx512:
      return Avx512KernelTable();
    case SimdPath::kAvx2:
      return Avx2KernelTable();
    case SimdPath::kAuto:
    case SimdPath::kScalar:
      break;
  }
  return ScalarKernelTable();
}

}  // namespace zerotrain::optim::internal

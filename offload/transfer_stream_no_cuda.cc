// MakeCudaTransferStream in a build without --config=cuda.
#include "absl/strings/str_cat.h"
#include "offload/transfer_stream.h"

namespace zerotrain::offload {

absl::StatusOr<std::unique_ptr<TransferStream>> MakeCudaTransferStream(c10::Device device) {
  return absl::UnimplementedError(absl::StrCat(
      "this binary was built without CUDA; build with --config=cuda to copy to ", device.str()));
}

}  // namespace zerotrain::offload

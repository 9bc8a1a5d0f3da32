// SwapSpace: NVMe swap space for named regions of host memory ("rank0.exp_avg"), one SwapFile
// each, swapped out and in whole through an AsyncFileIO. An offloading engine reserves every
// region at start-up (so a full disk fails then) and double-buffers sub-groups by swapping one
// region in while it steps another.
//
// Layout: a region of `bytes` occupies a file of `bytes` rounded up to 4 KiB (kIoAlignment, the
// O_DIRECT unit), not to aio.block_size: the block size is how transfers are cut, and padding
// every region to 1 MiB would only add unused disk. The last transfer of a region is shorter than
// block_size when the size is not a multiple of it. When `bytes` is not a multiple of 4 KiB the
// final partial page goes through a per-region bounce page, so host buffers need to hold exactly
// `bytes`, and must start on a 4 KiB boundary (PinnedHostPool's default alignment).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "offload/async_file_io.h"
#include "offload/swap_file.h"

namespace zerotrain::offload {

// Region bytes handed to the swap files since Create, as submitted (a transfer that later fails
// counts too): what offload costs in disk traffic.
struct SwapTraffic {
  int64_t bytes_read = 0;     // SwapIn
  int64_t bytes_written = 0;  // SwapOut
};

struct SwapSpaceOptions {
  // An existing directory (DeepSpeed's nvme_path); a private subdirectory is made inside it.
  std::string directory;
  AioOptions aio;
  bool use_o_direct = true;  // false: buffered I/O even where O_DIRECT works
};

class SwapSpace {
 public:
  // Creates `<directory>/zerotrain-swap-XXXXXX`; fails naming the directory and strerror when it
  // cannot (missing, not a directory, not writable), or with the AioOptions error.
  static absl::StatusOr<std::unique_ptr<SwapSpace>> Create(const SwapSpaceOptions& options);

  // Waits for the transfers in progress (cancelling queued ones), then removes the files and the
  // subdirectory.
  ~SwapSpace();
  SwapSpace(const SwapSpace&) = delete;
  SwapSpace& operator=(const SwapSpace&) = delete;

  // Creates region `name` ([A-Za-z0-9_.-], not starting with '.') of `bytes` > 0 with its file
  // preallocated. AlreadyExists for a reserved name; SwapFile's errors for the disk.
  absl::Status Reserve(const std::string& name, int64_t bytes);

  // Starts writing the region's `bytes` from `host` / reading them into `host` (4 KiB-aligned,
  // holding at least the region's bytes, valid until the handle reports completion). NotFound for
  // an unknown region, FailedPrecondition while the region's previous swap has not finished.
  absl::StatusOr<IoHandle> SwapOut(const std::string& name, const void* host);
  absl::StatusOr<IoHandle> SwapIn(const std::string& name, void* host);

  absl::StatusOr<int64_t> region_bytes(const std::string& name) const;
  absl::StatusOr<std::string> file_path(const std::string& name) const;

  const std::string& directory() const { return directory_; }
  // kBuffered if any file fell back to buffered I/O.
  IoMode mode() const;
  int64_t reserved_file_bytes() const;
  const AsyncFileIO& io() const { return *io_; }
  SwapTraffic traffic() const;

 private:
  struct Region;
  SwapSpace(std::string directory, std::unique_ptr<AsyncFileIO> io, bool use_o_direct);
  absl::StatusOr<IoHandle> Swap(const std::string& name, IoOp op, void* host);

  const std::string directory_;
  const bool use_o_direct_;
  // Declared before io_ so that it is destroyed after it: no transfer may outlive its file.
  mutable std::mutex mu_;  // guards regions_
  std::map<std::string, std::unique_ptr<Region>> regions_;
  SwapTraffic traffic_;  // guarded by mu_
  std::unique_ptr<AsyncFileIO> io_;
};

}  // namespace zerotrain::offload

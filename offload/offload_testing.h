// Helpers for offload/'s tests: private temporary directories, aligned buffers, reproducible
// random bytes, the small swap space the store tests share, and the faults (a directory nobody can
// write, a disk that is full) that must each give a clear error.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "offload/swap_space.h"

namespace zerotrain::offload::testing {

// A new empty directory under $TEST_TMPDIR (or /tmp), removed with its contents on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// `bytes` of 4 KiB-aligned memory.
struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
using AlignedBuffer = std::unique_ptr<char, FreeDeleter>;
AlignedBuffer MakeAlignedBuffer(int64_t bytes);

// Fills with bytes from a fixed generator seeded by `seed`: equal seeds, equal contents.
void FillRandom(void* data, int64_t bytes, uint64_t seed);

// "" when equal, else where and how the first difference is, for an assertion message.
std::string FirstDifference(const void* got, const void* want, int64_t bytes);

// A directory path under which nothing can be created: a 0555 directory when this process cannot
// write there, else (root ignores the mode) a path below a regular file. `why` tells which.
std::string UnwritableDirectory(const TempDir& dir, std::string* why);

// Fault set-ups run in a forked child, so that nothing they change outlives the test. The child
// runs `fn(arg)`; the outer status is an error when the set-up itself was impossible here (the
// test should then skip, saying why), the inner one is what `fn` returned.
using ChildFn = absl::Status (*)(const std::string& arg);

// A full disk: a tmpfs of `bytes` mounted at `dir` in a private mount namespace of the child
// (needs root / CAP_SYS_ADMIN; vanishes with the child, so no mount is ever left behind).
absl::StatusOr<absl::Status> RunOnSmallTmpfs(int64_t bytes, const std::string& dir, ChildFn fn);

// A file size limit: RLIMIT_FSIZE = `limit_bytes`, SIGXFSZ ignored, so growing a file past it
// fails with EFBIG instead of killing the child. Works for any user.
absl::StatusOr<absl::Status> RunWithFileSizeLimit(int64_t limit_bytes, const std::string& arg,
                                                  ChildFn fn);

// A SwapSpace in `dir` with small aio blocks (64 KiB, queue depth 4, 2 threads), as the
// SubGroupStore tests use; fails the calling test (and returns null) if it cannot be made.
std::unique_ptr<SwapSpace> MakeSmallSwapSpace(const std::string& dir);

}  // namespace zerotrain::offload::testing

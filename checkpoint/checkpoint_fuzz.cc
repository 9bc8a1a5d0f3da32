// libFuzzer target for the two checkpoint readers that parse untrusted bytes: the first input
// byte picks the manifest decoder (odd) or the shard file reader (even), which then reads every
// array it finds. Any crash, hang or sanitizer report is a bug; errors are the expected outcome.
// Compiled by clang-14 with -fsanitize=fuzzer,address: bazel build //checkpoint:checkpoint_fuzz,
// then bazel-bin/checkpoint/checkpoint_fuzz_bin -max_total_time=60 CORPUS (docs/CHECKPOINT.md).
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "checkpoint/manifest.h"
#include "checkpoint/shard_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace zerotrain::checkpoint;
  if (size == 0) return 0;
  const std::string bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] & 1) {
    (void)DecodeManifest(bytes, "fuzz input");
    return 0;
  }
  static const std::string path = absl::StrCat("/tmp/zt_checkpoint_fuzz.", getpid());
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  auto reader = ShardFileReader::Open(path);
  if (!reader.ok()) return 0;
  for (const ArrayInfo& a : reader->arrays()) (void)reader->ReadAllBytes(a.name);
  return 0;
}

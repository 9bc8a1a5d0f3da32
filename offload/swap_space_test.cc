// SwapSpace: exact round trips of regions whose sizes are not multiples of the block size (and
// no byte written past them), many regions in flight at once as an engine would double-buffer,
// file layout and clean-up, refusals, and the faults: an unwritable directory, a full disk, a
// file size limit and a swap file truncated mid-run.
#include "offload/swap_space.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "offload/offload_testing.h"

namespace zerotrain::offload {
namespace {

using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using testing::TempDir;

constexpr int64_t kMiB = 1 << 20;
const absl::Duration kLong = absl::Seconds(60);

std::unique_ptr<SwapSpace> MakeSpace(const std::string& dir, int64_t block_size = 64 << 10,
                                     bool direct = true) {
  SwapSpaceOptions o;
  o.directory = dir;
  o.aio = {block_size, 4, 2};
  o.use_o_direct = direct;
  absl::StatusOr<std::unique_ptr<SwapSpace>> s = SwapSpace::Create(o);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *std::move(s) : nullptr;
}

// Swaps a random region out and back in; the guard bytes after it must survive the swap-in.
void ExpectRoundTrip(SwapSpace& space, const std::string& name, int64_t bytes, uint64_t seed) {
  constexpr int64_t kGuard = 8192;
  testing::AlignedBuffer out = testing::MakeAlignedBuffer(bytes);
  testing::AlignedBuffer in = testing::MakeAlignedBuffer(bytes + kGuard);
  testing::FillRandom(out.get(), bytes, seed);
  std::memset(in.get(), 0x5a, bytes + kGuard);
  ASSERT_TRUE(space.Reserve(name, bytes).ok()) << name;
  absl::StatusOr<IoHandle> h = space.SwapOut(name, out.get());
  ASSERT_TRUE(h.ok()) << h.status();
  ASSERT_TRUE(h->Wait(kLong).ok()) << name;
  h = space.SwapIn(name, in.get());
  ASSERT_TRUE(h.ok()) << h.status();
  ASSERT_TRUE(h->Wait(kLong).ok()) << name;
  EXPECT_EQ(testing::FirstDifference(in.get(), out.get(), bytes), "") << name;
  for (int64_t i = bytes; i < bytes + kGuard; ++i) {
    ASSERT_EQ(in.get()[i], 0x5a) << name << ": byte " << i << " past the region was written";
  }
}

TEST(SwapSpaceTest, RoundTripsSizesThatAreNotMultiplesOfTheBlock) {
  TempDir dir;
  for (bool direct : {true, false}) {
    std::unique_ptr<SwapSpace> space = MakeSpace(dir.path(), 64 << 10, direct);
    ASSERT_NE(space, nullptr);
    const int64_t sizes[] = {1, 4095, 4096, 4097, 65536, 65537, 3 * 65536 + 12345, kMiB};
    for (int64_t bytes : sizes) {
      ExpectRoundTrip(*space, "r" + std::to_string(bytes), bytes, bytes + direct);
    }
    if (!direct) {
      EXPECT_EQ(space->mode(), IoMode::kBuffered);
    }
    std::printf("swap space mode with use_o_direct=%d: %s\n", direct, IoModeName(space->mode()));
  }
}

TEST(SwapSpaceTest, TrafficCountsEachRegionsBytesPerSwap) {
  TempDir dir;
  std::unique_ptr<SwapSpace> space = MakeSpace(dir.path());
  ASSERT_NE(space, nullptr);
  EXPECT_EQ(space->traffic().bytes_read + space->traffic().bytes_written, 0);
  ExpectRoundTrip(*space, "a", 5000, 1);
  ExpectRoundTrip(*space, "b", 3 * 65536 + 7, 2);
  testing::AlignedBuffer buf = testing::MakeAlignedBuffer(5000);
  absl::StatusOr<IoHandle> h = space->SwapIn("a", buf.get());
  ASSERT_TRUE(h.ok()) << h.status();
  ASSERT_TRUE(h->Wait(kLong).ok());
  // The region's own bytes, not the 4 KiB-padded file sizes.
  EXPECT_EQ(space->traffic().bytes_written, 5000 + 3 * 65536 + 7);
  EXPECT_EQ(space->traffic().bytes_read, 2 * 5000 + 3 * 65536 + 7);
}

TEST(SwapSpaceTest, FilesArePaddedTo4KiBPreallocatedAndRemovedOnDestruction) {
  TempDir dir;
  std::string subdir, path;
  {
    std::unique_ptr<SwapSpace> space = MakeSpace(dir.path());
    ASSERT_NE(space, nullptr);
    subdir = space->directory();
    EXPECT_THAT(subdir, HasSubstr(dir.path() + "/zerotrain-swap-"));
    ASSERT_TRUE(space->Reserve("rank0.exp_avg", 100000).ok());
    ASSERT_TRUE(space->Reserve("rank0.exp_avg_sq", 8192).ok());
    path = *space->file_path("rank0.exp_avg");
    EXPECT_EQ(path, subdir + "/rank0.exp_avg.swp");
    struct stat st;
    ASSERT_EQ(stat(path.c_str(), &st), 0);
    EXPECT_EQ(st.st_size, 102400);  // 100000 rounded up to 4 KiB, not to the 64 KiB block
    EXPECT_EQ(space->reserved_file_bytes(), 102400 + 8192);
    EXPECT_EQ(*space->region_bytes("rank0.exp_avg"), 100000);
  }
  EXPECT_NE(access(path.c_str(), F_OK), 0);
  EXPECT_NE(access(subdir.c_str(), F_OK), 0);
}

TEST(SwapSpaceTest, ManyRegionsInFlightAtOnce) {
  TempDir dir;
  std::unique_ptr<SwapSpace> space = MakeSpace(dir.path());
  ASSERT_NE(space, nullptr);
  constexpr int kRegions = 6;
  constexpr int64_t kBytes = kMiB + 123;
  std::vector<testing::AlignedBuffer> out, in;
  std::vector<IoHandle> handles;
  for (int i = 0; i < kRegions; ++i) {
    const std::string name = "rank0.group" + std::to_string(i);
    ASSERT_TRUE(space->Reserve(name, kBytes).ok());
    out.push_back(testing::MakeAlignedBuffer(kBytes));
    in.push_back(testing::MakeAlignedBuffer(kBytes));
    testing::FillRandom(out[i].get(), kBytes, 1000 + i);
    handles.push_back(*space->SwapOut(name, out[i].get()));
  }
  for (IoHandle& h : handles) ASSERT_TRUE(h.Wait(kLong).ok());
  // Double-buffering: group i swaps in while group i - 1 swaps out again.
  handles.clear();
  for (int i = 0; i < kRegions; ++i) {
    handles.push_back(*space->SwapIn("rank0.group" + std::to_string(i), in[i].get()));
    if (i > 0) {
      ASSERT_TRUE(handles[i - 1].Wait(kLong).ok());
      handles[i - 1] = *space->SwapOut("rank0.group" + std::to_string(i - 1), in[i - 1].get());
    }
  }
  for (IoHandle& h : handles) ASSERT_TRUE(h.Wait(kLong).ok());
  for (int i = 0; i < kRegions; ++i) {
    EXPECT_EQ(testing::FirstDifference(in[i].get(), out[i].get(), kBytes), "") << "region " << i;
  }
}

TEST(SwapSpaceTest, RefusesUnknownRegionsBadNamesUnalignedBuffersAndBusyRegions) {
  TempDir dir;
  std::unique_ptr<SwapSpace> space = MakeSpace(dir.path(), 4096);
  ASSERT_NE(space, nullptr);
  testing::AlignedBuffer buf = testing::MakeAlignedBuffer(16 * kMiB + 4096);
  EXPECT_EQ(space->SwapIn("nope", buf.get()).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(space->Reserve("../x", 4096).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(space->Reserve("", 4096).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(space->Reserve("z", 0).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(space->Reserve("big", 16 * kMiB).ok());
  EXPECT_EQ(space->Reserve("big", 4096).code(), absl::StatusCode::kAlreadyExists);
  absl::StatusOr<IoHandle> unaligned = space->SwapOut("big", buf.get() + 512);
  EXPECT_THAT(unaligned.status().message(), HasSubstr("is not 4096-byte aligned"));
  // 4096 transfers of 4 KiB: the second call comes long before the first can finish.
  absl::StatusOr<IoHandle> first = space->SwapOut("big", buf.get());
  ASSERT_TRUE(first.ok());
  absl::StatusOr<IoHandle> second = space->SwapIn("big", buf.get());
  if (second.ok()) {
    ADD_FAILURE() << "a 16 MiB swap-out in 4 KiB blocks finished before the next call";
  } else {
    EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(second.status().message(), HasSubstr("previous swap has not finished"));
  }
  ASSERT_TRUE(first->Wait(kLong).ok());
}

TEST(SwapSpaceTest, FileTruncatedMidRunFailsTheSwapInNamingFileAndOffset) {
  TempDir dir;
  std::unique_ptr<SwapSpace> space = MakeSpace(dir.path(), kMiB);
  ASSERT_NE(space, nullptr);
  ASSERT_TRUE(space->Reserve("rank0.exp_avg", 4 * kMiB).ok());
  testing::AlignedBuffer buf = testing::MakeAlignedBuffer(4 * kMiB);
  testing::FillRandom(buf.get(), 4 * kMiB, 9);
  ASSERT_TRUE(space->SwapOut("rank0.exp_avg", buf.get())->Wait(kLong).ok());
  const std::string path = *space->file_path("rank0.exp_avg");
  ASSERT_EQ(truncate(path.c_str(), kMiB + 512), 0);
  absl::StatusOr<IoHandle> h = space->SwapIn("rank0.exp_avg", buf.get());
  ASSERT_TRUE(h.ok());
  absl::Status s = h->Wait(kLong);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("swap-in of 'rank0.exp_avg' (4194304 bytes): SwapFile: "
                                     "short read of " +
                                     path));
  EXPECT_THAT(std::string(s.message()),
              ContainsRegex("at offset (1048576|2097152|3145728): wanted 1048576"));
}

TEST(SwapSpaceTest, UnwritableDirectoryFailsAtCreation) {
  TempDir dir;
  std::string why;
  const std::string bad = testing::UnwritableDirectory(dir, &why);
  SwapSpaceOptions o;
  o.directory = bad;
  absl::StatusOr<std::unique_ptr<SwapSpace>> s = SwapSpace::Create(o);
  ASSERT_FALSE(s.ok()) << why;
  EXPECT_THAT(s.status().message(), HasSubstr("cannot create a swap directory in " + bad));
  std::printf("unwritable directory: %s -> %s\n", why.c_str(), s.status().ToString().c_str());
}

absl::Status ReserveSmallThenFourMiB(const std::string& dir) {
  SwapSpaceOptions o;
  o.directory = dir;
  absl::StatusOr<std::unique_ptr<SwapSpace>> space = SwapSpace::Create(o);
  if (!space.ok()) return space.status();
  if (absl::Status s = (*space)->Reserve("small", 64 << 10); !s.ok()) return s;
  absl::Status s = (*space)->Reserve("rank0.exp_avg", 4 * kMiB);
  if (!s.ok() && (*space)->file_path("rank0.exp_avg").ok()) {
    return absl::InternalError("the failed Reserve left a region behind");
  }
  return s;
}

TEST(SwapSpaceTest, FullDiskFailsAtReserveNamingFileSizeAndCause) {
  TempDir dir;
  absl::StatusOr<absl::Status> r =
      testing::RunOnSmallTmpfs(kMiB, dir.path() + "/tmpfs", &ReserveSmallThenFourMiB);
  if (!r.ok()) GTEST_SKIP() << "no 1 MiB tmpfs here: " << r.status();
  EXPECT_EQ(r->code(), absl::StatusCode::kResourceExhausted) << *r;
  EXPECT_THAT(std::string(r->message()),
              ContainsRegex("cannot preallocate 4194304 bytes for .*/tmpfs/"
                            "zerotrain-swap-.*/rank0.exp_avg.swp"));
  EXPECT_THAT(r->message(), HasSubstr("No space left on device"));
}

TEST(SwapSpaceTest, FileSizeLimitFailsAtReserve) {
  TempDir dir;
  absl::StatusOr<absl::Status> r =
      testing::RunWithFileSizeLimit(kMiB, dir.path(), &ReserveSmallThenFourMiB);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(r->message(), HasSubstr("rank0.exp_avg.swp (posix_fallocate): File too large"));
}

}  // namespace
}  // namespace zerotrain::offload

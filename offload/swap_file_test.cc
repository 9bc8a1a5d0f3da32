// SwapFile: preallocation, O_DIRECT or buffered round trips with exact bytes, argument checks,
// and the faults that must each be one clear error: an unwritable directory, a full disk, a file
// size limit, a write refused mid-run and a file truncated under us.
#include "offload/swap_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <memory>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "offload/offload_testing.h"

namespace zerotrain::offload {
namespace {

using ::testing::HasSubstr;
using testing::TempDir;

constexpr int64_t kMiB = 1 << 20;

std::unique_ptr<SwapFile> MustCreate(const std::string& path, int64_t bytes, bool direct = true) {
  absl::StatusOr<std::unique_ptr<SwapFile>> f = SwapFile::Create(path, bytes, direct);
  EXPECT_TRUE(f.ok()) << f.status();
  return f.ok() ? *std::move(f) : nullptr;
}

TEST(SwapFileTest, IsPreallocatedAtCreationAndRemovedOnDestruction) {
  TempDir dir;
  const std::string path = dir.path() + "/a.swp";
  {
    std::unique_ptr<SwapFile> f = MustCreate(path, 8 * kMiB);
    ASSERT_NE(f, nullptr);
    struct stat st;
    ASSERT_EQ(stat(path.c_str(), &st), 0);
    EXPECT_EQ(st.st_size, 8 * kMiB);
    EXPECT_GE(int64_t{st.st_blocks} * 512, 8 * kMiB) << "the blocks are not allocated";
    std::printf("%s on this filesystem\n", IoModeName(f->mode()));
  }
  EXPECT_NE(access(path.c_str(), F_OK), 0);
}

TEST(SwapFileTest, RoundTripsExactBytesDirectAndBuffered) {
  TempDir dir;
  for (bool direct : {true, false}) {
    std::unique_ptr<SwapFile> f = MustCreate(dir.path() + "/rt.swp", 4 * kMiB, direct);
    ASSERT_NE(f, nullptr);
    if (!direct) {
      EXPECT_EQ(f->mode(), IoMode::kBuffered);
    }
    testing::AlignedBuffer out = testing::MakeAlignedBuffer(kMiB + 8192);
    testing::AlignedBuffer in = testing::MakeAlignedBuffer(kMiB + 8192);
    testing::FillRandom(out.get(), kMiB + 8192, direct ? 1 : 2);
    ASSERT_TRUE(f->Write(3 * 4096, out.get(), kMiB + 8192).ok());
    ASSERT_TRUE(f->Read(3 * 4096, in.get(), kMiB + 8192).ok());
    EXPECT_EQ(testing::FirstDifference(in.get(), out.get(), kMiB + 8192), "")
        << IoModeName(f->mode());
  }
}

TEST(SwapFileTest, RejectsUnalignedAndOutOfRangeTransfers) {
  TempDir dir;
  std::unique_ptr<SwapFile> f = MustCreate(dir.path() + "/r.swp", kMiB);
  ASSERT_NE(f, nullptr);
  testing::AlignedBuffer buf = testing::MakeAlignedBuffer(2 * kMiB);
  absl::Status s = f->Read(100, buf.get(), 4096);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("offset 100"));
  EXPECT_EQ(f->Write(0, buf.get() + 8, 4096).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(f->Write(0, buf.get(), 4000).code(), absl::StatusCode::kInvalidArgument);
  s = f->Read(kMiB - 4096, buf.get(), 8192);
  EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange);
  EXPECT_THAT(s.message(), HasSubstr(f->path()));
  EXPECT_EQ(SwapFile::Create(dir.path() + "/odd.swp", 5000).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(SwapFileTest, RefusesAFileThatAlreadyExists) {
  TempDir dir;
  std::unique_ptr<SwapFile> f = MustCreate(dir.path() + "/x.swp", kMiB);
  absl::StatusOr<std::unique_ptr<SwapFile>> again = SwapFile::Create(dir.path() + "/x.swp", kMiB);
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(access((dir.path() + "/x.swp").c_str(), F_OK), 0) << "the failure removed f's file";
}

TEST(SwapFileTest, UnwritableDirectoryFailsNamingTheFile) {
  TempDir dir;
  std::string why;
  const std::string bad = testing::UnwritableDirectory(dir, &why);
  absl::StatusOr<std::unique_ptr<SwapFile>> f = SwapFile::Create(bad + "/s.swp", kMiB);
  ASSERT_FALSE(f.ok()) << why;
  EXPECT_THAT(f.status().message(), HasSubstr("cannot create " + bad + "/s.swp")) << why;
}

TEST(SwapFileTest, TruncatedFileIsAShortReadNamingFileOffsetAndSizes) {
  TempDir dir;
  std::unique_ptr<SwapFile> f = MustCreate(dir.path() + "/t.swp", 4 * kMiB);
  ASSERT_NE(f, nullptr);
  testing::AlignedBuffer buf = testing::MakeAlignedBuffer(kMiB);
  testing::FillRandom(buf.get(), kMiB, 3);
  ASSERT_TRUE(f->Write(kMiB, buf.get(), kMiB).ok());
  ASSERT_EQ(truncate(f->path().c_str(), kMiB + 1000), 0);  // mid-block, unaligned
  absl::Status s = f->Read(kMiB, buf.get(), kMiB);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("short read of " + f->path() + " at offset 1048576"));
  EXPECT_THAT(s.message(), HasSubstr("wanted 1048576 bytes"));
  EXPECT_THAT(s.message(), HasSubstr("now 1049576 bytes"));
  s = f->Read(2 * kMiB, buf.get(), kMiB);  // wholly past the new end
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("at offset 2097152: wanted 1048576 bytes, got 0"));
}

absl::Status CreateFourMiB(const std::string& dir) {
  const std::string path = dir + "/big.swp";
  absl::Status s = SwapFile::Create(path, 4 * kMiB).status();
  if (!s.ok() && access(path.c_str(), F_OK) == 0) {
    return absl::InternalError("the failed creation left " + path + " behind");
  }
  return s;
}

TEST(SwapFileTest, FullDiskFailsAtCreationNamingFileSizeAndCause) {
  TempDir dir;
  const std::string mnt = dir.path() + "/tmpfs";
  absl::StatusOr<absl::Status> r = testing::RunOnSmallTmpfs(kMiB, mnt, &CreateFourMiB);
  if (!r.ok()) GTEST_SKIP() << "no 1 MiB tmpfs here: " << r.status();
  EXPECT_EQ(r->code(), absl::StatusCode::kResourceExhausted) << *r;
  EXPECT_THAT(r->message(), HasSubstr("cannot preallocate 4194304 bytes for " + mnt + "/big.swp"));
  EXPECT_THAT(r->message(), HasSubstr("No space left on device"));
}

TEST(SwapFileTest, FileSizeLimitFailsAtCreation) {
  TempDir dir;
  absl::StatusOr<absl::Status> r = testing::RunWithFileSizeLimit(kMiB, dir.path(), &CreateFourMiB);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(r->message(), HasSubstr("cannot preallocate 4194304 bytes for " + dir.path()));
  EXPECT_THAT(r->message(), HasSubstr("File too large"));
}

const SwapFile* g_file = nullptr;  // the forked child inherits it, and its descriptor

absl::Status WriteAtTwoMiB(const std::string&) {
  testing::AlignedBuffer buf = testing::MakeAlignedBuffer(kMiB);
  return g_file->Write(2 * kMiB, buf.get(), kMiB);
}

TEST(SwapFileTest, WriteRefusedMidRunNamesFileAndOffset) {
  TempDir dir;
  std::unique_ptr<SwapFile> f = MustCreate(dir.path() + "/w.swp", 4 * kMiB);
  ASSERT_NE(f, nullptr);
  g_file = f.get();
  absl::StatusOr<absl::Status> r = testing::RunWithFileSizeLimit(kMiB, "", &WriteAtTwoMiB);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(r->message(),
              HasSubstr("write of 1048576 bytes to " + f->path() + " at offset 2097152 failed"));
  EXPECT_THAT(r->message(), HasSubstr("File too large"));
}

}  // namespace
}  // namespace zerotrain::offload

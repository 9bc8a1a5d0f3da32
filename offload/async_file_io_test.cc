// AsyncFileIO: block round trips with exact bytes, many requests from many threads at once,
// bounded waits (a request held open times out, then completes), error context, argument checks
// that queue nothing, and cancellation on destruction.
#include "offload/async_file_io.h"

#include <unistd.h>

#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "offload/offload_testing.h"

namespace zerotrain::offload {
namespace {

using ::testing::HasSubstr;
using testing::TempDir;

constexpr int64_t kMiB = 1 << 20;
const absl::Duration kLong = absl::Seconds(60);  // a generous bound: reaching it is a hang

std::unique_ptr<AsyncFileIO> MakeIo(int64_t block_size, int queue_depth, int thread_count) {
  absl::StatusOr<std::unique_ptr<AsyncFileIO>> io =
      AsyncFileIO::Create({block_size, queue_depth, thread_count});
  EXPECT_TRUE(io.ok()) << io.status();
  return io.ok() ? *std::move(io) : nullptr;
}

std::unique_ptr<SwapFile> MakeFile(const TempDir& dir, const std::string& name, int64_t bytes) {
  absl::StatusOr<std::unique_ptr<SwapFile>> f = SwapFile::Create(dir.path() + "/" + name, bytes);
  EXPECT_TRUE(f.ok()) << f.status();
  return f.ok() ? *std::move(f) : nullptr;
}

TEST(AsyncFileIOTest, RoundTripsARangeCutIntoBlocks) {
  TempDir dir;
  std::unique_ptr<AsyncFileIO> io = MakeIo(256 << 10, 4, 2);
  std::unique_ptr<SwapFile> f = MakeFile(dir, "a.swp", 8 * kMiB);
  ASSERT_TRUE(io && f);
  EXPECT_EQ(io->io_threads(), 8);
  const int64_t n = 5 * kMiB + 3 * 4096;  // not a multiple of the block size
  testing::AlignedBuffer out = testing::MakeAlignedBuffer(n), in = testing::MakeAlignedBuffer(n);
  testing::FillRandom(out.get(), n, 11);
  std::vector<IoBlock> blocks = io->SplitIntoBlocks(*f, IoOp::kWrite, 4096, out.get(), n);
  ASSERT_EQ(blocks.size(), 21u);
  EXPECT_EQ(blocks.back().bytes, 3 * 4096);
  absl::StatusOr<IoHandle> w = io->Submit("write", std::move(blocks));
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_TRUE(w->Wait(kLong).ok());
  EXPECT_TRUE(w->done());
  absl::StatusOr<IoHandle> r =
      io->Submit("read", io->SplitIntoBlocks(*f, IoOp::kRead, 4096, in.get(), n));
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->Wait(kLong).ok());
  EXPECT_EQ(testing::FirstDifference(in.get(), out.get(), n), "");
}

TEST(AsyncFileIOTest, ManyRequestsFromManyThreadsAtOnce) {
  TempDir dir;
  std::unique_ptr<AsyncFileIO> io = MakeIo(64 << 10, 4, 2);
  constexpr int kThreads = 4, kPerThread = 6;
  constexpr int64_t kSlot = 320 << 10;
  std::unique_ptr<SwapFile> f = MakeFile(dir, "c.swp", kThreads * kPerThread * kSlot);
  ASSERT_TRUE(io && f);
  std::vector<std::string> failures(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::vector<testing::AlignedBuffer> out, in;
      std::vector<IoHandle> handles;
      for (int i = 0; i < kPerThread; ++i) {  // all writes in flight together
        out.push_back(testing::MakeAlignedBuffer(kSlot));
        testing::FillRandom(out.back().get(), kSlot, 100 * t + i);
        const int64_t off = (t * kPerThread + i) * kSlot;
        absl::StatusOr<IoHandle> h =
            io->Submit("w", io->SplitIntoBlocks(*f, IoOp::kWrite, off, out.back().get(), kSlot));
        if (h.ok()) handles.push_back(*h);
      }
      for (IoHandle& h : handles) {
        if (absl::Status s = h.Wait(kLong); !s.ok()) failures[t] += s.ToString();
      }
      handles.clear();
      for (int i = 0; i < kPerThread; ++i) {
        in.push_back(testing::MakeAlignedBuffer(kSlot));
        const int64_t off = (t * kPerThread + i) * kSlot;
        absl::StatusOr<IoHandle> h =
            io->Submit("r", io->SplitIntoBlocks(*f, IoOp::kRead, off, in.back().get(), kSlot));
        if (h.ok()) handles.push_back(*h);
      }
      for (IoHandle& h : handles) {
        if (absl::Status s = h.Wait(kLong); !s.ok()) failures[t] += s.ToString();
      }
      if (handles.size() != kPerThread) failures[t] += "a Submit failed";
      for (int i = 0; i < kPerThread; ++i) {
        failures[t] += testing::FirstDifference(in[i].get(), out[i].get(), kSlot);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(failures[t], "") << "thread " << t;
}

TEST(AsyncFileIOTest, WaitTimesOutWhileTheRequestIsHeldThenCompletes) {
  TempDir dir;
  std::unique_ptr<AsyncFileIO> io = MakeIo(kMiB, 1, 1);
  std::unique_ptr<SwapFile> f = MakeFile(dir, "t.swp", kMiB);
  ASSERT_TRUE(io && f);
  testing::AlignedBuffer buf = testing::MakeAlignedBuffer(kMiB);
  absl::Notification release;
  absl::StatusOr<IoHandle> h =
      io->Submit("held write", io->SplitIntoBlocks(*f, IoOp::kWrite, 0, buf.get(), kMiB), [&] {
        release.WaitForNotification();
        return absl::OkStatus();
      });
  ASSERT_TRUE(h.ok()) << h.status();
  absl::Status s = h->Wait(absl::Milliseconds(50));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(s.message(), HasSubstr("held write: not finished after 50ms"));
  EXPECT_FALSE(h->done());
  release.Notify();
  EXPECT_TRUE(h->Wait(kLong).ok());
  EXPECT_TRUE(h->Wait(absl::ZeroDuration()).ok());  // finished: same answer, no waiting
}

TEST(AsyncFileIOTest, ErrorsNameTheRequestFileAndOffset) {
  TempDir dir;
  std::unique_ptr<AsyncFileIO> io = MakeIo(kMiB, 2, 1);
  std::unique_ptr<SwapFile> f = MakeFile(dir, "e.swp", 2 * kMiB);
  ASSERT_TRUE(io && f);
  testing::AlignedBuffer buf = testing::MakeAlignedBuffer(2 * kMiB);
  ASSERT_EQ(truncate(f->path().c_str(), kMiB), 0);
  absl::StatusOr<IoHandle> h =
      io->Submit("read of e", io->SplitIntoBlocks(*f, IoOp::kRead, 0, buf.get(), 2 * kMiB));
  ASSERT_TRUE(h.ok());
  absl::Status s = h->Wait(kLong);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(),
              HasSubstr("read of e: SwapFile: short read of " + f->path() + " at offset 1048576"));
  // on_success's error becomes the request's, with the same context.
  h = io->Submit("checked", io->SplitIntoBlocks(*f, IoOp::kWrite, 0, buf.get(), kMiB),
                 [] { return absl::InternalError("copy-out failed"); });
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->Wait(kLong).message(), "checked: copy-out failed");
}

TEST(AsyncFileIOTest, AnInvalidBlockFailsTheSubmitAndQueuesNothing) {
  TempDir dir;
  std::unique_ptr<AsyncFileIO> io = MakeIo(kMiB, 2, 1);
  std::unique_ptr<SwapFile> f = MakeFile(dir, "i.swp", 2 * kMiB);
  ASSERT_TRUE(io && f);
  testing::AlignedBuffer buf = testing::MakeAlignedBuffer(2 * kMiB), zero;
  testing::FillRandom(buf.get(), 2 * kMiB, 5);
  std::vector<IoBlock> blocks = io->SplitIntoBlocks(*f, IoOp::kWrite, 0, buf.get(), kMiB);
  blocks.push_back({f.get(), IoOp::kWrite, 3 * kMiB, buf.get(), kMiB});  // beyond the file
  absl::StatusOr<IoHandle> h = io->Submit("bad", std::move(blocks));
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_THAT(h.status().message(), HasSubstr("bad: SwapFile: write of " + f->path()));
  EXPECT_EQ(io->Submit("empty", {}).status().code(), absl::StatusCode::kInvalidArgument);
  // The valid first block was not written either: the file still reads as zeros.
  h = io->Submit("r", io->SplitIntoBlocks(*f, IoOp::kRead, 0, buf.get(), kMiB));
  ASSERT_TRUE(h.ok() && h->Wait(kLong).ok());
  zero = testing::MakeAlignedBuffer(kMiB);
  std::memset(zero.get(), 0, kMiB);
  EXPECT_EQ(testing::FirstDifference(buf.get(), zero.get(), kMiB), "");
}

TEST(AsyncFileIOTest, DestructionCancelsQueuedTransfers) {
  TempDir dir;
  std::unique_ptr<AsyncFileIO> io = MakeIo(kMiB, 1, 1);  // one thread
  std::unique_ptr<SwapFile> f = MakeFile(dir, "d.swp", 2 * kMiB);
  ASSERT_TRUE(io && f);
  testing::AlignedBuffer buf = testing::MakeAlignedBuffer(2 * kMiB);
  absl::Notification started, release;
  absl::StatusOr<IoHandle> first =
      io->Submit("first", io->SplitIntoBlocks(*f, IoOp::kWrite, 0, buf.get(), kMiB), [&] {
        started.Notify();
        release.WaitForNotification();  // holds the only I/O thread
        return absl::OkStatus();
      });
  ASSERT_TRUE(first.ok());
  ASSERT_TRUE(started.WaitForNotificationWithTimeout(kLong));
  absl::StatusOr<IoHandle> second =
      io->Submit("second", io->SplitIntoBlocks(*f, IoOp::kWrite, kMiB, buf.get(), kMiB));
  ASSERT_TRUE(second.ok());
  std::thread destroyer([&] { io.reset(); });
  absl::Status s = second->Wait(kLong);
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled);
  EXPECT_THAT(s.message(), HasSubstr("second: AsyncFileIO destroyed before the transfer at "
                                     "offset 1048576 of " +
                                     f->path()));
  release.Notify();
  destroyer.join();
  EXPECT_TRUE(first->Wait(kLong).ok());
}

TEST(AsyncFileIOTest, RejectsBadOptions) {
  EXPECT_THAT(AsyncFileIO::Create({1000, 8, 1}).status().message(),
              HasSubstr("aio.block_size must be a positive multiple of 4096, got 1000"));
  EXPECT_EQ(AsyncFileIO::Create({kMiB, 0, 1}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(AsyncFileIO::Create({kMiB, 64, 32}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace zerotrain::offload

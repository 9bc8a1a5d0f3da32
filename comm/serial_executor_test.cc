// SerialExecutor runs tasks one at a time in posting order, off the posting thread, and its
// destructor runs what is still queued before returning.
#include "comm/serial_executor.h"

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace zerotrain::comm {
namespace {

TEST(SerialExecutorTest, RunsInOrderOffThePostingThread) {
  std::vector<int> order;
  std::atomic<int> running{0};
  bool overlapped = false, on_caller = false;
  const std::thread::id caller = std::this_thread::get_id();
  {
    SerialExecutor executor;
    for (int i = 0; i < 100; ++i) {
      executor.Post([&, i] {
        if (running.fetch_add(1) != 0) overlapped = true;
        if (std::this_thread::get_id() == caller) on_caller = true;
        if (i % 10 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        order.push_back(i);
        running.fetch_sub(1);
      });
    }
  }  // the destructor drains the queue
  ASSERT_EQ(order.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(order[i], i);
  EXPECT_FALSE(overlapped);
  EXPECT_FALSE(on_caller);
}

TEST(SerialExecutorTest, IdleExecutorStopsPromptly) {
  const auto start = std::chrono::steady_clock::now();
  { SerialExecutor executor; }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
}

}  // namespace
}  // namespace zerotrain::comm

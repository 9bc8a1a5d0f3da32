// SerialExecutor: one thread that runs posted tasks one at a time, in the order they were
// posted. ProcessGroup uses it to run each collective's call check and launch off the caller's
// thread while keeping every rank's collectives in issue order.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace zerotrain::comm {

class SerialExecutor {
 public:
  SerialExecutor();
  // Runs every task already posted, then stops the thread.
  ~SerialExecutor();
  SerialExecutor(const SerialExecutor&) = delete;
  SerialExecutor& operator=(const SerialExecutor&) = delete;

  void Post(std::function<void()> task);

 private:
  void Run();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  bool stopping_ = false;
  std::thread thread_;  // last: it starts once the members above exist
};

}  // namespace zerotrain::comm

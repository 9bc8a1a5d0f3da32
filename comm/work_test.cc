// Work's two waits: WaitOnStream runs a step's device-side form where it has one and leaves the
// host check for Wait; without device forms (CPU backends) it is Wait.
#include "comm/work.h"

#include <gtest/gtest.h>

#include <string>

namespace zerotrain::comm {
namespace {

OpDesc Op() {
  OpDesc op;
  op.kind = CollectiveKind::kAllReduce;
  op.numel = 4;
  return op;
}

TEST(WorkTest, WaitOnStreamDefersTheHostCheckToWait) {
  std::string trace;
  Work w(Op(),
         {[&] { return trace += "host;", absl::OkStatus(); },
          [&] { return trace += "after;", absl::OkStatus(); }},
         {[&] { return trace += "stream;", absl::OkStatus(); }, nullptr}, nullptr);
  ASSERT_TRUE(w.WaitOnStream().ok());
  EXPECT_EQ(trace, "stream;after;");
  ASSERT_TRUE(w.Wait().ok());
  EXPECT_EQ(trace, "stream;after;host;");
  ASSERT_TRUE(w.Wait().ok());  // nothing runs twice
  EXPECT_EQ(trace, "stream;after;host;");
}

TEST(WorkTest, WithoutDeviceFormsWaitOnStreamIsWait) {
  int runs = 0;
  Work w(Op(), {[&] { return ++runs, absl::OkStatus(); }}, nullptr);
  ASSERT_TRUE(w.WaitOnStream().ok());
  EXPECT_EQ(runs, 1);
  ASSERT_TRUE(w.Wait().ok());
  EXPECT_EQ(runs, 1);
}

TEST(WorkTest, ADeferredFailureSurfacesAtWaitWithTheOpAndReachesTheSink) {
  std::string sunk;
  Work w(Op(), {[] { return absl::DeadlineExceededError("peer gone"); }},
         {[] { return absl::OkStatus(); }},
         [&](const absl::Status& s) { sunk = std::string(s.message()); });
  EXPECT_TRUE(w.WaitOnStream().ok());
  absl::Status s = w.Wait();
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(std::string(s.message()).find("all_reduce"), std::string::npos) << s;
  EXPECT_NE(std::string(s.message()).find("peer gone"), std::string::npos) << s;
  EXPECT_EQ(sunk, std::string(s.message()));
  EXPECT_EQ(w.Wait(), s);
}

TEST(WorkTest, AStepThatFailsOnTheHostStopsTheRest) {
  int later = 0;
  Work w(Op(),
         {[] { return absl::AbortedError("launch failed"); },
          [&] { return ++later, absl::OkStatus(); }},
         nullptr);
  EXPECT_EQ(w.WaitOnStream().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(later, 0);
  EXPECT_EQ(w.Wait().code(), absl::StatusCode::kAborted);
}

}  // namespace
}  // namespace zerotrain::comm

// SpawnRanks reports results, errors, crashes and hangs per rank, each in its own process.
#include "tests/spawn_ranks.h"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace zerotrain::testing {
namespace {

TEST(SpawnRanks, EachRankRunsInItsOwnProcessWithRendezvousEnv) {
  auto outcomes = SpawnRanks(3, [](int rank) -> absl::StatusOr<std::string> {
    return absl::StrCat(std::getenv("RANK"), "/", std::getenv("WORLD_SIZE"), "/", getpid());
  });
  ASSERT_EQ(outcomes.size(), 3u);
  std::set<std::string> pids;
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(outcomes[r].status.ok()) << FormatOutcomes(outcomes);
    EXPECT_EQ(outcomes[r].payload.substr(0, 4), absl::StrCat(r, "/3/"));
    pids.insert(outcomes[r].payload.substr(4));
  }
  EXPECT_EQ(pids.size(), 3u);
  EXPECT_EQ(pids.count(std::to_string(getpid())), 0u);
}

TEST(SpawnRanks, ReportsErrorsCrashesAndHangsPerRank) {
  SpawnOptions options;
  options.deadline = std::chrono::seconds(10);
  auto outcomes = SpawnRanks(
      4,
      [](int rank) -> absl::StatusOr<std::string> {
        if (rank == 1) return absl::NotFoundError("no such thing");
        if (rank == 2) raise(SIGKILL);
        if (rank == 3) std::this_thread::sleep_for(std::chrono::seconds(60));
        return std::string("fine");
      },
      options);
  EXPECT_TRUE(outcomes[0].status.ok());
  EXPECT_EQ(outcomes[0].payload, "fine");
  EXPECT_EQ(outcomes[1].status.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(outcomes[1].status.message(), "no such thing");
  EXPECT_EQ(outcomes[2].status.code(), absl::StatusCode::kAborted);
  EXPECT_NE(outcomes[2].status.message().find("signal 9"), std::string::npos);
  EXPECT_EQ(outcomes[3].status.code(), absl::StatusCode::kDeadlineExceeded);
}

TEST(SpawnRanks, StopsTheOthersOnceTheAwaitedRanksEnd) {
  SpawnOptions options;
  options.awaited_ranks = {0, 2};
  const auto start = std::chrono::steady_clock::now();
  auto outcomes = SpawnRanks(
      3,
      [](int rank) -> absl::StatusOr<std::string> {
        if (rank == 1) raise(SIGSTOP);
        return std::string("fine");
      },
      options);
  EXPECT_LT(std::chrono::steady_clock::now() - start, options.deadline / 2);
  EXPECT_EQ(outcomes[0].payload, "fine");
  EXPECT_EQ(outcomes[2].payload, "fine");
  EXPECT_EQ(outcomes[1].status.code(), absl::StatusCode::kCancelled) << FormatOutcomes(outcomes);
  EXPECT_NE(outcomes[1].status.message().find("awaited ranks had ended"), std::string::npos);
}

}  // namespace
}  // namespace zerotrain::testing

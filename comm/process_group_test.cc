// Failure behaviour of ProcessGroup: dead ranks, absent ranks, disagreeing calls, a rank of another
// job and a port in use end in a clear error within the timeout, never a hang or silent
// corruption.
#include "comm/process_group.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/ones.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "comm/testing.h"
#include "gtest/gtest.h"
#include "tests/spawn_ranks.h"
#include "tools/status_macros.h"

namespace zerotrain::comm {
namespace {

using zerotrain::testing::FormatOutcomes;
using zerotrain::testing::SpawnRanks;

constexpr auto kTimeout = std::chrono::milliseconds(3000);

GroupOptions ShortTimeout() {
  GroupOptions o;
  o.timeout = kTimeout;
  return o;
}

void ExpectFailedInTime(const zerotrain::testing::RankOutcome& o, const std::string& needle) {
  ASSERT_TRUE(o.status.ok()) << o.status;
  const size_t bar = o.payload.find('|');
  const double seconds = std::stod(o.payload.substr(0, bar));
  const std::string message = o.payload.substr(bar + 1);
  EXPECT_LT(seconds, 2.0 * kTimeout.count() / 1000.0) << message;
  EXPECT_TRUE(absl::StrContains(message, needle)) << message << "\nwanted: " << needle;
}

TEST(ProcessGroupFailure, KilledRankFailsTheOthersWithOpContext) {
  auto outcomes = SpawnRanks(3, [](int rank) -> absl::StatusOr<std::string> {
    ZT_ASSIGN_OR_RETURN(auto group, JoinGroupFromEnv(ShortTimeout()));
    at::Tensor t = at::ones({1 << 16});
    ZT_RETURN_IF_ERROR(group->AllReduce(t, ReduceOp::kSum));
    if (rank == 2) raise(SIGKILL);
    return TimedFailure([&] { return group->AllReduce(t, ReduceOp::kSum); });
  });
  EXPECT_NE(outcomes[2].status.message().find("signal 9"), std::string::npos);
  ExpectFailedInTime(outcomes[0], "all_reduce #1 (sum, 65536 x Float) on rank 0 of 3");
  ExpectFailedInTime(outcomes[1], "all_reduce #1 (sum, 65536 x Float) on rank 1 of 3");
}

TEST(ProcessGroupFailure, RankThatNeverCallsTimesOutTheOthers) {
  auto outcomes = SpawnRanks(2, [](int rank) -> absl::StatusOr<std::string> {
    ZT_ASSIGN_OR_RETURN(auto group, JoinGroupFromEnv(ShortTimeout()));
    at::Tensor t = at::ones({100});
    if (rank == 1) {
      std::this_thread::sleep_for(kTimeout + std::chrono::seconds(1));
      return std::string("0|slept");
    }
    return TimedFailure([&] { return group->ReduceScatter(t, at::empty({50}), ReduceOp::kSum); });
  });
  ExpectFailedInTime(
      outcomes[0], "DEADLINE_EXCEEDED: comm: reduce_scatter #0 (sum, 100 x Float) on rank 0 of 2");
}

// A rank stopped (SIGSTOP) keeps its sockets open, so only the timeout can tell: the others fail
// within it, each naming the stopped rank and the collective it did not join.
TEST(ProcessGroupFailure, StoppedRankIsNamedWithinTheTimeout) {
  zerotrain::testing::SpawnOptions spawn;
  spawn.deadline = 4 * kTimeout;
  spawn.awaited_ranks = {0, 1};  // then the stopped rank is killed
  auto outcomes = SpawnRanks(
      3,
      [](int rank) -> absl::StatusOr<std::string> {
        ZT_ASSIGN_OR_RETURN(auto group, JoinGroupFromEnv(ShortTimeout()));
        at::Tensor t = at::ones({1000});
        ZT_RETURN_IF_ERROR(group->AllReduce(t, ReduceOp::kSum));
        if (rank == 2) raise(SIGSTOP);
        return TimedFailure([&] { return group->AllGather(at::ones({10}), at::empty({30})); });
      },
      spawn);
  for (int rank : {0, 1}) {
    SCOPED_TRACE(rank);
    ExpectFailedInTime(outcomes[rank], absl::StrCat("DEADLINE_EXCEEDED: comm: all_gather #1 (30 x "
                                                    "Float) on rank ",
                                                    rank, " of 3"));
    ExpectFailedInTime(outcomes[rank], "call check: rank 2 did not reach this call within 3000 ms");
    const double seconds = std::stod(outcomes[rank].payload);
    EXPECT_GE(seconds, 0.9 * kTimeout.count() / 1000.0) << "failed before the timeout";
  }
}

// Without the call check the transfer itself times out, and Gloo does not say for whom it
// waited; the peers that no longer answer a liveness ping are named instead.
TEST(ProcessGroupFailure, StoppedRankIsNamedWhenTheTransferTimesOut) {
  zerotrain::testing::SpawnOptions spawn;
  spawn.deadline = 4 * kTimeout;
  spawn.awaited_ranks = {0, 1};  // then the stopped rank is killed
  auto outcomes = SpawnRanks(
      3,
      [](int rank) -> absl::StatusOr<std::string> {
        GroupOptions options = ShortTimeout();
        options.check_calls = false;
        ZT_ASSIGN_OR_RETURN(auto group, JoinGroupFromEnv(options));
        at::Tensor t = at::ones({1000});
        ZT_RETURN_IF_ERROR(group->AllReduce(t, ReduceOp::kSum));
        if (rank == 2) raise(SIGSTOP);
        return TimedFailure([&] { return group->AllReduce(t, ReduceOp::kSum); });
      },
      spawn);
  for (int rank : {0, 1}) {
    SCOPED_TRACE(rank);
    ExpectFailedInTime(outcomes[rank],
                       absl::StrCat("all_reduce #1 (sum, 1000 x Float) on rank ", rank, " of 3"));
    ExpectFailedInTime(outcomes[rank], "; rank 2 did not answer a liveness probe");
  }
}

TEST(ProcessGroupFailure, RendezvousWithAMissingRankTimesOut) {
  auto outcomes = SpawnRanks(2, [](int rank) -> absl::StatusOr<std::string> {
    if (rank == 1) return std::string("0|absent");
    return TimedFailure([&] { return JoinGroupFromEnv(ShortTimeout()).status(); });
  });
  ExpectFailedInTime(outcomes[0], "rendezvous: rank 1 of 2 did not reach the store at 127.0.0.1:");
  ExpectFailedInTime(outcomes[0], "(this is rank 0; the world size came from torchrun's variables");
}

// Two jobs given one port: the rank of the other job is refused by name before it writes anything
// into this job's store.
TEST(ProcessGroupFailure, RankOfAnotherJobIsRefusedByName) {
  auto outcomes = SpawnRanks(2, [](int rank) -> absl::StatusOr<std::string> {
    setenv("ZT_JOB_ID", rank == 0 ? "job-a" : "job-b", 1);
    return TimedFailure([&] { return JoinGroupFromEnv(ShortTimeout()).status(); });
  });
  ExpectFailedInTime(outcomes[1],
                     "rendezvous: rank 1 of job \"job-b\" reached the store of job "
                     "\"job-a\" at 127.0.0.1:");
  ExpectFailedInTime(outcomes[1], "pass --master_port=PORT");
}

// A port another process listens on: rank 0 fails at once, says so and how to choose another,
// and does not quote the timeout it never waited for.
TEST(ProcessGroupFailure, PortInUseFailsAtOnceNamingIt) {
  auto outcomes = SpawnRanks(1, [](int rank) -> absl::StatusOr<std::string> {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || listen(fd, 1) != 0) {
      return absl::InternalError("could not hold a port");
    }
    socklen_t len = sizeof(addr);
    getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    const std::string port = std::to_string(ntohs(addr.sin_port));
    setenv("MASTER_PORT", port.c_str(), 1);
    GroupOptions options;  // the default 300 s: it must not be waited for
    auto outcome = TimedFailure([&] { return JoinGroupFromEnv(options).status(); });
    if (outcome.ok()) *outcome += "|port " + port;
    return outcome;
  });
  const std::string& p = outcomes[0].payload;
  const std::string port = p.substr(p.rfind("|port ") + 6);
  ExpectFailedInTime(outcomes[0], "port " + port + " is in use");
  ExpectFailedInTime(outcomes[0], "pass --master_port=PORT");
  EXPECT_FALSE(absl::StrContains(p, " ms")) << p;
  EXPECT_FALSE(absl::StrContains(p, "\n")) << p;
}

TEST(ProcessGroupFailure, DisagreeingCallsAreReportedOnEveryRank) {
  auto outcomes = SpawnRanks(2, [](int rank) -> absl::StatusOr<std::string> {
    ZT_ASSIGN_OR_RETURN(auto group, JoinGroupFromEnv(ShortTimeout()));
    at::Tensor t = at::ones({rank == 0 ? 1000 : 999});
    return TimedFailure([&] { return group->AllReduce(t, ReduceOp::kSum); });
  });
  ExpectFailedInTime(outcomes[0], "rank 1 called all_reduce #0 (sum, 999 x Float) on rank 1 of 2");
  ExpectFailedInTime(outcomes[1], "rank 0 called all_reduce #0 (sum, 1000 x Float) on rank 0 of 2");
}

TEST(ProcessGroupFailure, DifferentOpsAtTheSameSequenceNumberAreReported) {
  auto outcomes = SpawnRanks(2, [](int rank) -> absl::StatusOr<std::string> {
    ZT_ASSIGN_OR_RETURN(auto group, JoinGroupFromEnv(ShortTimeout()));
    at::Tensor t = at::ones({64}, at::kBFloat16);
    return TimedFailure(
        [&] { return rank == 0 ? group->AllReduce(t, ReduceOp::kSum) : group->Broadcast(t, 0); });
  });
  ExpectFailedInTime(outcomes[0], "FAILED_PRECONDITION");
  ExpectFailedInTime(outcomes[0], "rank 1 called broadcast #0 (root 0, 64 x BFloat16)");
  ExpectFailedInTime(outcomes[1], "rank 0 called all_reduce #0 (sum, 64 x BFloat16)");
}

TEST(ProcessGroupFailure, GroupRefusesCallsAfterAFailure) {
  auto outcomes = SpawnRanks(2, [](int rank) -> absl::StatusOr<std::string> {
    ZT_ASSIGN_OR_RETURN(auto group, JoinGroupFromEnv(ShortTimeout()));
    at::Tensor t = at::ones({rank + 1});
    if (group->AllReduce(t, ReduceOp::kSum).ok()) return absl::InternalError("mismatch passed");
    absl::Status again = group->Barrier();
    if (!absl::StrContains(again.message(), "unusable after an earlier failure")) {
      return absl::InternalError(absl::StrCat("second call said: ", again.ToString()));
    }
    return std::string("ok");
  });
  for (const auto& o : outcomes) EXPECT_TRUE(o.status.ok()) << FormatOutcomes(outcomes);
}

TEST(ProcessGroupArguments, BadArgumentsNameTheOpAndTheProblem) {
  auto outcomes = SpawnRanks(1, [](int rank) -> absl::StatusOr<std::string> {
    ZT_ASSIGN_OR_RETURN(auto group, JoinGroupFromEnv(ShortTimeout()));
    std::vector<std::string> errors;
    errors.push_back(
        group->ReduceScatter(at::ones({10}), at::empty({9}), ReduceOp::kSum).ToString());
    errors.push_back(group->AllReduce(at::ones({4}, at::kInt), ReduceOp::kAvg).ToString());
    errors.push_back(group->AllReduce(at::ones({4, 4}).t(), ReduceOp::kSum).ToString());
    errors.push_back(group->Broadcast(at::ones({4}), 3).ToString());
    errors.push_back(group->AllReduce(at::ones({4}, at::kComplexFloat), ReduceOp::kSum).ToString());
    return absl::StrJoin(errors, "\n");
  });
  ASSERT_TRUE(outcomes[0].status.ok()) << outcomes[0].status;
  const std::string& e = outcomes[0].payload;
  EXPECT_TRUE(absl::StrContains(
      e, "reduce_scatter output has 9 elements, the shard of 10 over 1 ranks has 10"))
      << e;
  EXPECT_TRUE(absl::StrContains(e, "avg needs a floating-point tensor, got Int")) << e;
  EXPECT_TRUE(absl::StrContains(e, "all_reduce tensor is not contiguous")) << e;
  EXPECT_TRUE(absl::StrContains(e, "broadcast root 3 is not a rank of 1")) << e;
  EXPECT_TRUE(absl::StrContains(e, "unsupported dtype ComplexFloat")) << e;
}

// Subgroups: pairs {0, 1} and {2, 3}, then {0, 2} and {1, 3}, each all-reducing its own members'
// values; their ops land in the parent's log with their own world size; a rank naming a subgroup
// it is not in, or members out of order, is refused without touching the store.
TEST(ProcessGroupSubgroups, PairsReduceAmongThemselves) {
  auto outcomes = SpawnRanks(4, [](int rank) -> absl::StatusOr<std::string> {
    GroupOptions o = ShortTimeout();
    o.log_ops = true;
    ZT_ASSIGN_OR_RETURN(auto group, JoinGroupFromEnv(o));
    for (const std::vector<std::vector<int>>& split :
         {std::vector<std::vector<int>>{{0, 1}, {2, 3}}, {{0, 2}, {1, 3}}}) {
      const std::vector<int>& mine =
          split[0][0] == rank || split[0][1] == rank ? split[0] : split[1];
      ZT_ASSIGN_OR_RETURN(auto sub, group->CreateSubgroup(mine));
      at::Tensor t = at::ones({3}).mul(rank + 1);
      ZT_RETURN_IF_ERROR(sub->AllReduce(t, ReduceOp::kSum));
      const float want = mine[0] + mine[1] + 2;
      if (sub->world_size() != 2 || sub->rank() != (mine[0] == rank ? 0 : 1) ||
          t[2].item<float>() != want) {
        return absl::InternalError(absl::StrCat("subgroup [", absl::StrJoin(mine, ", "), "]: got ",
                                                t[2].item<float>(), ", want ", want));
      }
    }
    int pairs = 0;
    for (const OpStats& st : group->log().Stats()) pairs += st.world_size == 2 ? st.count : 0;
    if (pairs != 2) return absl::InternalError(absl::StrCat(pairs, " two-rank ops logged"));
    const absl::Status outside = group->CreateSubgroup({(rank + 1) % 4}).status();
    const absl::Status unordered = group->CreateSubgroup({3, 2, 1, 0}).status();
    if (!absl::StrContains(outside.message(), "it is not a member of") ||
        !absl::StrContains(unordered.message(), "ascending")) {
      return absl::InternalError(absl::StrCat(outside.ToString(), " / ", unordered.ToString()));
    }
    ZT_RETURN_IF_ERROR(group->Barrier());
    return std::string("ok");
  });
  for (const auto& o : outcomes) EXPECT_TRUE(o.status.ok()) << FormatOutcomes(outcomes);
}

}  // namespace
}  // namespace zerotrain::comm

// What the shm backend promises beyond the common collective checks (collectives_test.cc): sums
// bitwise equal on every rank and to a plain left-to-right reference, an all-gather whose input is
// its own slice of the output, no segment left in /dev/shm, and dead or silent peers reported
// quickly instead of hanging.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/full.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/zeros.h>
#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "comm/process_group.h"
#include "comm/testing.h"
#include "gtest/gtest.h"
#include "tests/spawn_ranks.h"
#include "tools/status_macros.h"

namespace zerotrain::comm {
namespace {

using zerotrain::testing::FormatOutcomes;
using zerotrain::testing::SpawnRanks;

GroupOptions Shm(std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
  GroupOptions o;
  o.backend = BackendKind::kShm;
  o.timeout = timeout;
  // The call check would notice a dead peer on its own TCP connection first; these tests are
  // about the shared memory's own detection.
  o.check_calls = false;
  return o;
}

// Rank r's input: the same on every rank that asks, so each can build the reference itself.
at::Tensor InputOf(int r, int64_t n) {
  at::Tensor t = at::empty({n});
  float* p = t.data_ptr<float>();
  uint64_t x = 0x9e3779b97f4a7c15ull * (r + 1);
  for (int64_t i = 0; i < n; ++i) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    p[i] = static_cast<float>(static_cast<int64_t>(x % 2000001) - 1000000) * 1e-3f;
  }
  return t;
}

TEST(ShmBackend, SumsAreBitwiseTheLeftToRightSumOnEveryRank) {
  // Three ranks, and more elements than one slot holds, so chunks and slot sets alternate.
  constexpr int kWorld = 3;
  constexpr int64_t kN = 3'000'001;
  auto outcomes = SpawnRanks(kWorld, [](int rank) -> absl::StatusOr<std::string> {
    ZT_ASSIGN_OR_RETURN(auto group, JoinGroupFromEnv(Shm()));
    at::Tensor t = InputOf(rank, kN);
    ZT_RETURN_IF_ERROR(group->AllReduce(t, ReduceOp::kSum));
    at::Tensor want = InputOf(0, kN);
    for (int r = 1; r < kWorld; ++r) want.add_(InputOf(r, kN));
    if (!at::equal(t, want)) {
      const int64_t i = t.ne(want).nonzero()[0].item<int64_t>();
      return absl::InternalError(absl::StrCat("element ", i, " is ", t[i].item<float>(),
                                              ", the reference sum ", want[i].item<float>()));
    }
    // The reduce-scatter of the same inputs is this rank's slice of the same sums.
    const int64_t shard = (kN + kWorld - 1) / kWorld;
    at::Tensor mine = at::empty({shard});
    ZT_RETURN_IF_ERROR(group->ReduceScatter(InputOf(rank, kN), mine, ReduceOp::kSum));
    const int64_t real = std::min(shard, kN - rank * shard);
    if (!at::equal(mine.narrow(0, 0, real), want.narrow(0, rank * shard, real))) {
      return absl::InternalError("reduce_scatter differs from the all_reduce's slice");
    }
    return std::string("ok");
  });
  for (const auto& o : outcomes) EXPECT_TRUE(o.status.ok()) << FormatOutcomes(outcomes);
}

TEST(ShmBackend, AllGatherInPlaceFromItsOwnSlice) {
  constexpr int kWorld = 2;
  constexpr int64_t kShard = 5'000'000;  // 20 MB per rank: several slots
  auto outcomes = SpawnRanks(kWorld, [](int rank) -> absl::StatusOr<std::string> {
    ZT_ASSIGN_OR_RETURN(auto group, JoinGroupFromEnv(Shm()));
    at::Tensor full = at::full({kWorld * kShard}, -1.0f);
    full.narrow(0, rank * kShard, kShard).copy_(InputOf(rank, kShard));
    ZT_RETURN_IF_ERROR(group->AllGather(full.narrow(0, rank * kShard, kShard), full));
    for (int r = 0; r < kWorld; ++r) {
      if (!at::equal(full.narrow(0, r * kShard, kShard), InputOf(r, kShard))) {
        return absl::InternalError(absl::StrCat("rank ", r, "'s slice is wrong"));
      }
    }
    return std::string("ok");
  });
  for (const auto& o : outcomes) EXPECT_TRUE(o.status.ok()) << FormatOutcomes(outcomes);
}

TEST(ShmBackend, ManyChunkedOpsStayExactUnderSkew) {
  // Four ranks on the 2-core machine, each pausing at random between ops: ranks run chunks
  // apart, so a slot set is reused while slower peers may still be on the previous chunk.
  constexpr int kWorld = 4;
  constexpr int64_t kN = 2'500'003;  // 10 MB: several 4 MiB slots
  auto outcomes = SpawnRanks(kWorld, [](int rank) -> absl::StatusOr<std::string> {
    ZT_ASSIGN_OR_RETURN(auto group, JoinGroupFromEnv(Shm()));
    uint32_t seed = 17u * (rank + 1);
    at::Tensor want = InputOf(0, kN);
    for (int r = 1; r < kWorld; ++r) want.add_(InputOf(r, kN));
    const int64_t shard = (kN + kWorld - 1) / kWorld;
    for (int round = 0; round < 6; ++round) {
      seed = seed * 1103515245u + 12345u;
      std::this_thread::sleep_for(std::chrono::microseconds(seed % 3000));
      at::Tensor t = InputOf(rank, kN);
      ZT_RETURN_IF_ERROR(group->AllReduce(t, ReduceOp::kSum));
      if (!at::equal(t, want))
        return absl::InternalError(absl::StrCat("round ", round, ": all_reduce"));
      at::Tensor gathered = at::empty({shard * kWorld});
      ZT_RETURN_IF_ERROR(group->AllGather(InputOf(rank, shard), gathered));
      for (int r = 0; r < kWorld; ++r) {
        if (!at::equal(gathered.narrow(0, r * shard, shard), InputOf(r, shard))) {
          return absl::InternalError(absl::StrCat("round ", round, ": all_gather part ", r));
        }
      }
      at::Tensor b = rank == round % kWorld ? InputOf(rank, kN) : at::zeros({kN});
      ZT_RETURN_IF_ERROR(group->Broadcast(b, round % kWorld));
      if (!at::equal(b, InputOf(round % kWorld, kN))) {
        return absl::InternalError(absl::StrCat("round ", round, ": broadcast"));
      }
    }
    return std::string("ok");
  });
  for (const auto& o : outcomes) EXPECT_TRUE(o.status.ok()) << FormatOutcomes(outcomes);
}

TEST(ShmBackend, DifferentCallsFailEveryRankEvenWithoutTheCallCheck) {
  auto outcomes = SpawnRanks(2, [](int rank) -> absl::StatusOr<std::string> {
    ZT_ASSIGN_OR_RETURN(auto group, JoinGroupFromEnv(Shm()));
    at::Tensor t = at::ones({rank == 0 ? 1000 : 999});
    absl::Status s = group->AllReduce(t, ReduceOp::kSum);
    if (s.ok()) return absl::InternalError("all_reduce of different sizes succeeded");
    // The group is unusable afterwards, on every rank.
    if (group->Barrier().ok()) return absl::InternalError("the group still works");
    return std::string(s.message());
  });
  ASSERT_TRUE(outcomes[0].status.ok()) << FormatOutcomes(outcomes);
  ASSERT_TRUE(outcomes[1].status.ok()) << FormatOutcomes(outcomes);
  EXPECT_TRUE(
      absl::StrContains(outcomes[0].payload,
                        "ranks called different collectives: rank 0 called all_reduce of "
                        "4000 bytes (Float, reduction/root 0), rank 1 all_reduce of 3996 bytes"))
      << outcomes[0].payload;
  EXPECT_TRUE(absl::StrContains(outcomes[1].payload, "rank 1 called all_reduce of 3996 bytes"))
      << outcomes[1].payload;
}

TEST(ShmBackend, LeavesNothingInDevShm) {
  auto outcomes = SpawnRanks(2, [](int rank) -> absl::StatusOr<std::string> {
    ZT_ASSIGN_OR_RETURN(auto group, JoinGroupFromEnv(Shm()));
    ZT_RETURN_IF_ERROR(group->Barrier());
    // Rank 0 made the segment, named after its pid; every rank has mapped it, so it is unlinked.
    if (rank == 0) {
      const std::string prefix = absl::StrCat("zt-shm-", getpid(), "-");
      DIR* dir = opendir("/dev/shm");
      if (dir == nullptr) return absl::InternalError("cannot list /dev/shm");
      std::string found;
      while (dirent* e = readdir(dir)) {
        if (absl::StartsWith(e->d_name, prefix)) found = e->d_name;
      }
      closedir(dir);
      if (!found.empty()) return absl::InternalError(absl::StrCat("/dev/shm/", found, " remains"));
    }
    at::Tensor t = at::ones({10});
    ZT_RETURN_IF_ERROR(group->AllReduce(t, ReduceOp::kSum));  // still usable without the name
    return std::string("ok");
  });
  for (const auto& o : outcomes) EXPECT_TRUE(o.status.ok()) << FormatOutcomes(outcomes);
}

// Checks a TimedFailure payload: failed within `within_s`, with `needle` in the message.
void ExpectFailure(const zerotrain::testing::RankOutcome& o, double within_s,
                   const std::string& needle) {
  ASSERT_TRUE(o.status.ok()) << o.status;
  const size_t bar = o.payload.find('|');
  EXPECT_LT(std::stod(o.payload.substr(0, bar)), within_s) << o.payload;
  EXPECT_TRUE(absl::StrContains(o.payload, needle)) << o.payload << "\nwanted: " << needle;
}

TEST(ShmBackend, ADeadRankIsNoticedLongBeforeTheTimeout) {
  auto outcomes = SpawnRanks(3, [](int rank) -> absl::StatusOr<std::string> {
    ZT_ASSIGN_OR_RETURN(auto group, JoinGroupFromEnv(Shm(std::chrono::seconds(60))));
    at::Tensor t = at::ones({1 << 16});
    ZT_RETURN_IF_ERROR(group->AllReduce(t, ReduceOp::kSum));
    if (rank == 2) raise(SIGKILL);
    return TimedFailure([&] { return group->AllReduce(t, ReduceOp::kSum); });
  });
  EXPECT_TRUE(absl::StrContains(outcomes[2].status.message(), "signal 9")) << outcomes[2].status;
  ExpectFailure(outcomes[0], 10.0, "shm: rank 2 (pid");
  ExpectFailure(outcomes[1], 10.0, "shm: rank 2 (pid");
  ExpectFailure(outcomes[0], 10.0, "all_reduce #1 (sum, 65536 x Float) on rank 0 of 3");
}

TEST(ShmBackend, ASilentRankTimesOutTheOthers) {
  constexpr auto kTimeout = std::chrono::milliseconds(2000);
  auto outcomes = SpawnRanks(2, [kTimeout](int rank) -> absl::StatusOr<std::string> {
    ZT_ASSIGN_OR_RETURN(auto group, JoinGroupFromEnv(Shm(kTimeout)));
    if (rank == 1) {
      std::this_thread::sleep_for(kTimeout + std::chrono::seconds(2));
      return std::string("0|slept");
    }
    at::Tensor t = at::ones({100});
    return TimedFailure([&] { return group->Broadcast(t, 1); });
  });
  ExpectFailure(outcomes[0], 2.0 * kTimeout.count() / 1000.0, "DEADLINE_EXCEEDED");
  ExpectFailure(outcomes[0], 60, "rank 1 did not arrive");
}

}  // namespace
}  // namespace zerotrain::comm

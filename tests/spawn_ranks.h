// SpawnRanks: runs a function as N ranks, each a separate process of the current test binary, over
// a real TCP store on loopback, and collects every rank's result or error. Processes (not
// threads) because a rank must be able to die, hang or crash without taking the others along.
//
// Inside a gtest TEST, the helper re-executes the test binary once per rank with
// --gtest_filter naming the current test and the torchrun variables set (RANK, WORLD_SIZE,
// LOCAL_RANK, MASTER_ADDR=127.0.0.1, MASTER_PORT=a free port, and OMP_NUM_THREADS=1 unless set,
// as torchrun does). In a child, the call runs `fn` for
// that rank, writes the result and exits; so a TEST may call SpawnRanks only once.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace zerotrain::testing {

struct RankOutcome {
  int rank = 0;
  absl::Status status;  // fn's error, or how the process ended if it wrote no result
  std::string payload;  // fn's returned value when OK
  double seconds = 0;   // wall time of fn in that process (0 if it wrote no result)
};

struct SpawnOptions {
  // All ranks are killed past this; their outcome is then DeadlineExceeded.
  std::chrono::milliseconds deadline{std::chrono::seconds(120)};
  // When not empty, only these ranks are waited for: once they have all ended, the others (a rank
  // a test stops or hangs on purpose) are killed, their outcome Cancelled, instead of holding the
  // test until the deadline.
  std::vector<int> awaited_ranks;
  // Extra environment for every rank.
  std::map<std::string, std::string> env;
};

using RankFn = std::function<absl::StatusOr<std::string>(int rank)>;

std::vector<RankOutcome> SpawnRanks(int world_size, const RankFn& fn,
                                    const SpawnOptions& options = {});

// "rank 0: OK; rank 1: INTERNAL: ..." for assertion messages.
std::string FormatOutcomes(const std::vector<RankOutcome>& outcomes);

}  // namespace zerotrain::testing

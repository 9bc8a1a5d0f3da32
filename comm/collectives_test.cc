// Every collective over Gloo and over shared memory, checked exactly against a scalar reference
// (collective_checks.h), for world sizes 1-4; and asynchronous ops waited on in reverse order.
#include <ATen/core/Tensor.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/full.h>

#include <tuple>

#include "absl/strings/str_cat.h"
#include "comm/collective_checks.h"
#include "comm/process_group.h"
#include "comm/testing.h"
#include "gtest/gtest.h"
#include "tests/spawn_ranks.h"
#include "tools/status_macros.h"

namespace zerotrain::comm {
namespace {

using zerotrain::testing::FormatOutcomes;
using zerotrain::testing::SpawnRanks;

class CollectivesTest : public ::testing::TestWithParam<std::tuple<BackendKind, int>> {
 protected:
  static GroupOptions Options() {
    GroupOptions o;
    o.backend = std::get<0>(GetParam());
    return o;
  }
};

TEST_P(CollectivesTest, ExactForEveryDtypeAndCount) {
  const int world = std::get<1>(GetParam());
  auto outcomes = SpawnRanks(world, [](int rank) -> absl::StatusOr<std::string> {
    ZT_ASSIGN_OR_RETURN(auto group, JoinGroupFromEnv(Options()));
    ZT_RETURN_IF_ERROR(CheckEveryCollective(*group, at::kCPU));
    ZT_RETURN_IF_ERROR(group->Barrier());
    // Host tensors on a host transport: nothing was staged (nccl_backend_test counts staging).
    const HostDeviceBytes t = group->staging_traffic();
    if (t.device_to_host + t.host_to_device != 0) {
      return absl::InternalError(absl::StrCat("host tensors counted as staged: ", t.device_to_host,
                                              " + ", t.host_to_device, " bytes"));
    }
    return std::string("ok");
  });
  for (const auto& o : outcomes) EXPECT_TRUE(o.status.ok()) << FormatOutcomes(outcomes);
}

TEST_P(CollectivesTest, AsyncOpsCompleteInAnyWaitOrder) {
  const int world = std::get<1>(GetParam());
  auto outcomes = SpawnRanks(world, [world](int rank) -> absl::StatusOr<std::string> {
    ZT_ASSIGN_OR_RETURN(auto group, JoinGroupFromEnv(Options()));
    std::vector<at::Tensor> tensors;
    std::vector<Work> works;
    for (int k = 0; k < 8; ++k) {
      tensors.push_back(at::full({1000 + k}, static_cast<float>(rank + k)));
      works.push_back(group->AllReduceAsync(tensors.back(), ReduceOp::kSum));
    }
    for (int k = 7; k >= 0; --k) ZT_RETURN_IF_ERROR(works[k].Wait());
    for (int k = 0; k < 8; ++k) {
      const double want = world * (world - 1) / 2.0 + world * k;
      if (!at::equal(tensors[k], at::full({1000 + k}, want))) {
        return absl::InternalError(absl::StrCat("async all_reduce ", k, " != ", want));
      }
    }
    return std::string("ok");
  });
  for (const auto& o : outcomes) EXPECT_TRUE(o.status.ok()) << FormatOutcomes(outcomes);
}

INSTANTIATE_TEST_SUITE_P(BackendsAndWorlds, CollectivesTest,
                         ::testing::Combine(::testing::Values(BackendKind::kGloo,
                                                              BackendKind::kShm),
                                            ::testing::Values(1, 2, 3, 4)),
                         [](const ::testing::TestParamInfo<CollectivesTest::ParamType>& info) {
                           return absl::StrCat(
                               std::get<0>(info.param) == BackendKind::kGloo ? "gloo" : "shm",
                               "_world", std::get<1>(info.param));
                         });

}  // namespace
}  // namespace zerotrain::comm

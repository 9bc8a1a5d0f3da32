// Averages a vector across the ranks named by the environment (torchrun-style variables) with
// zerotrain's comm/ and checks the result: proof that comm/ is usable from another repository.
#include <ATen/ATen.h>

#include <cstdio>

#include "comm/comm.h"

int main() {
  namespace comm = zerotrain::comm;
  auto info = comm::RendezvousFromEnv();
  if (!info.ok()) {
    std::fprintf(stderr, "average: %s\n", std::string(info.status().message()).c_str());
    return 2;
  }
  auto group = comm::ProcessGroup::Create(*info, comm::GroupOptions{});
  if (!group.ok()) {
    std::fprintf(stderr, "average: %s\n", std::string(group.status().message()).c_str());
    return 1;
  }
  at::Tensor t = at::full({1000}, static_cast<float>(info->rank));
  absl::Status s = (*group)->AllReduce(t, comm::ReduceOp::kAvg);
  if (!s.ok()) {
    std::fprintf(stderr, "average: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  const float want = (info->world_size - 1) / 2.0f;
  const bool ok = at::allclose(t, at::full({1000}, want));
  std::printf("average: rank %d of %d got %.3f, expected %.3f: %s\n", info->rank, info->world_size,
              t[0].item<float>(), want, ok ? "ok" : "WRONG");
  return ok ? 0 : 1;
}

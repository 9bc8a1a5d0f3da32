// A region swapped out to a file and back with zerotrain's offload/ alone (pool memory, swap
// space, exact bytes compared): proof that offload/ is usable from another repository without
// the rest of zerotrain, and without LibTorch.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "offload/offload.h"

int main() {
  namespace offload = zerotrain::offload;
  const int64_t n = (3 << 20) + 123;  // not a multiple of the block size, nor of 4 KiB
  absl::StatusOr<offload::PinnedHostPool> pool = offload::PinnedHostPool::Create({});
  absl::StatusOr<offload::HostBlock> out = pool->Allocate(n), in = pool->Allocate(n);
  offload::SwapSpaceOptions o;
  const char* tmp = std::getenv("TMPDIR");
  o.directory = tmp != nullptr ? tmp : "/tmp";
  absl::StatusOr<std::unique_ptr<offload::SwapSpace>> space = offload::SwapSpace::Create(o);
  absl::Status s = !out.ok() ? out.status() : !in.ok() ? in.status() : space.status();
  if (s.ok()) {
    for (int64_t i = 0; i < n; ++i) out->as<unsigned char>()[i] = (i * 131 + 7) % 251;
    s = (*space)->Reserve("rank0.exp_avg", n);
  }
  absl::StatusOr<offload::IoHandle> h;
  if (s.ok()) h = (*space)->SwapOut("rank0.exp_avg", out->data());
  if (s.ok()) s = h.ok() ? h->Wait(absl::Seconds(60)) : h.status();
  if (s.ok()) h = (*space)->SwapIn("rank0.exp_avg", in->data());
  if (s.ok()) s = h.ok() ? h->Wait(absl::Seconds(60)) : h.status();
  if (!s.ok()) {
    std::fprintf(stderr, "swap_round_trip: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  const bool ok = std::memcmp(in->data(), out->data(), n) == 0;
  std::printf("swap_round_trip: %lld bytes through %s swap files: %s\n", static_cast<long long>(n),
              offload::IoModeName((*space)->mode()), ok ? "ok" : "WRONG");
  return ok ? 0 : 1;
}

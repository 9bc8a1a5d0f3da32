// Conversions shared by the backends.
#include "comm/backend.h"

#include <ATen/ops/empty.h>
#include <c10/util/Exception.h>

#include "absl/strings/match.h"

namespace zerotrain::comm {

absl::StatusOr<Transfer> Backend::AllToAll(at::Tensor& input, at::Tensor& output, int rank,
                                           int world_size) {
  at::Tensor gathered = at::empty({input.numel() * world_size}, input.options());
  absl::StatusOr<Transfer> t = AllGather(input, gathered);
  if (!t.ok()) return t;
  const int64_t block = output.numel() / world_size;
  auto wait = [wait = t->wait, gathered, output, rank, world_size, block]() mutable {
    absl::Status s = wait();
    if (!s.ok()) return s;
    const int64_t n = gathered.numel() / world_size;
    for (int r = 0; r < world_size; ++r) {
      output.narrow(0, r * block, block).copy_(gathered.narrow(0, r * n + rank * block, block));
    }
    return absl::OkStatus();
  };
  // The copies above read what the transfer wrote: on a stream-ordered transport they are
  // ordered after it on the caller's stream once order_stream has run.
  return Transfer{wait, t->order_stream ? Work::Step([order = t->order_stream, wait]() mutable {
                    absl::Status s = order();
                    return s.ok() ? wait() : s;
                  })
                                        : nullptr};
}

absl::Status StatusFromException(const std::exception& e) {
  std::string msg;
  if (const auto* c10_error = dynamic_cast<const c10::Error*>(&e)) {
    msg = c10_error->what_without_backtrace();
  } else {
    msg = e.what();
  }
  // Gloo and c10d phrase timeouts in several ways ("Timed out", "timed out", "Timeout").
  if (absl::StrContains(msg, "imed out") || absl::StrContains(msg, "imeout")) {
    return absl::DeadlineExceededError(msg);
  }
  return absl::AbortedError(msg);
}

}  // namespace zerotrain::comm

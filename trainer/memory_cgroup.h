// MemoryCgroup: a memory cap on a group of processes, for benchmarks that ask "what fits in N
// bytes" (offload_bench). It makes a child of this process's own memory cgroup (so whatever caps
// this process still applies), or one at the root, with the limit set (cgroup v1:
// memory.limit_in_bytes and memsw; v2: memory.max). A launcher enters it just before starting
// its children, which inherit it, and leaves right after.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace zerotrain::trainer {

class MemoryCgroup {
 public:
  // Unavailable, saying why, where no memory controller is mounted or none is writable.
  static absl::StatusOr<std::unique_ptr<MemoryCgroup>> Create(int64_t limit_bytes);
  ~MemoryCgroup();  // removes the cgroup, waiting up to 5 s for it to empty

  absl::Status Enter() const;  // moves this process in
  absl::Status Leave() const;  // and back to where it was
  // The kernel's count of OOM kills in the cgroup so far; -1 when it cannot be read.
  int64_t OomKills() const;
  const std::string& description() const { return how_; }  // what was set, where

 private:
  MemoryCgroup() = default;
  std::string dir_, home_, how_, events_;
};

}  // namespace zerotrain::trainer

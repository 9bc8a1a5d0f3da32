// ShmSegment: the shared memory the shm backend's ranks (all on one host) move data through. It
// holds two sets of one slot per rank, so a rank can fill the next set while its peers still read
// the last, and a phase counter per rank: a rank announces each step of a collective it finished,
// and waits (on a futex, bounded by a deadline) until every peer has announced it too. A peer
// whose process is gone is noticed within ~0.1 s instead of at the deadline.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "comm/backend.h"

namespace zerotrain::comm {

class ShmSegment {
 public:
  using Deadline = std::chrono::steady_clock::time_point;

  // Collective over ctx.store, bounded by ctx.timeout. Rank 0 creates a segment of
  // 2 * world_size slots of `slot_bytes` under /dev/shm and publishes its name; the others map
  // it. Once every rank has, rank 0 removes the name, so nothing is left behind when the job
  // ends, however it ends. Ranks on different hosts are an error naming both hosts.
  static absl::StatusOr<std::unique_ptr<ShmSegment>> Attach(const BackendContext& ctx,
                                                            size_t slot_bytes);
  ~ShmSegment();
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;

  int rank() const { return rank_; }
  int world_size() const { return world_; }
  size_t slot_bytes() const { return slot_bytes_; }
  // Rank r's slot in set 0 or 1: every rank may read it, only r writes it.
  char* slot(int set, int r) const;

  // Announces that this rank finished its next phase (what it wrote before is visible to any rank
  // that waits for the phase); returns the phase's number.
  uint32_t Arrive();
  // Returns once every rank has announced `phase`. DeadlineExceeded at `deadline`, naming `what`
  // and the ranks that had not; Aborted when one of them has exited or gave up on an earlier wait.
  absl::Status WaitAll(uint32_t phase, Deadline deadline, const std::string& what);
  // What this rank's data in slot set `set` is part of (set before the Arrive that shares it).
  // Once every rank has announced that phase, and until this rank announces it has read the set,
  // FirstDiffering finds a rank whose signature differs (-1 when none does): ranks that called
  // different collectives are caught there instead of exchanging the wrong bytes.
  void Sign(int set, uint64_t signature);
  int FirstDiffering(int set, uint64_t signature) const;
  uint64_t signature(int set, int r) const;
  // This rank gives up: peers waiting on it fail within ~0.1 s instead of at their deadline.
  void MarkFailed();
  // MarkFailed, and this rank's own waits end (Cancelled) within ~0.1 s: for tearing down.
  void Abandon();

 private:
  struct Header;
  struct RankControl;
  ShmSegment(int rank, int world, size_t slot_bytes, void* base, size_t bytes);
  Header* header() const;
  RankControl* control(int r) const;
  absl::Status WaitFor(int r, uint32_t phase, Deadline deadline, const std::string& what);

  int rank_;
  int world_;
  size_t slot_bytes_;
  void* base_;
  size_t bytes_;
  size_t data_offset_;
  uint32_t phase_ = 0;  // the last phase this rank announced
  std::atomic<bool> abandoned_{false};
};

}  // namespace zerotrain::comm

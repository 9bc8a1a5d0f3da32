// GradientBucketer: packs gradients, in the order backward produces them, into flat buckets of a
// fixed byte size and starts each bucket's reduction the moment it is full, so communication of
// early gradients overlaps the computation of later ones. Finish() flushes the last bucket and
// waits for all of them.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <vector>

#include "absl/status/status.h"
#include "comm/process_group.h"

namespace zerotrain::comm {

struct BucketOptions {
  // A tensor larger than this gets a bucket of its own.
  int64_t bucket_bytes = 25 << 20;
  // kAllReduce: every rank ends with the reduced tensors (copied back into the added ones).
  // kReduceScatter: each rank keeps only its shard of every bucket (see ReducedBucket).
  enum class Mode { kAllReduce, kReduceScatter } mode = Mode::kAllReduce;
  ReduceOp op = ReduceOp::kAvg;
};

// Where an added tensor lies in its bucket's flat buffer.
struct BucketEntry {
  int tensor_index = 0;  // position in the order of Add() calls
  int64_t offset = 0;
  int64_t numel = 0;
};

struct ReducedBucket {
  std::vector<BucketEntry> entries;
  int64_t numel = 0;  // elements packed; the buffer is padded to a multiple of the world size
  // kReduceScatter: this rank's shard of the reduced bucket, covering `range` of [0, numel) and
  // zero past it. kAllReduce: the whole reduced buffer.
  at::Tensor result;
  ShardRange range;
};

class GradientBucketer {
 public:
  GradientBucketer(ProcessGroup* group, BucketOptions options);

  // Copies `grad` into the open bucket of its dtype (tensors of different dtypes never share a
  // bucket); launches that bucket's reduction if `grad` does not fit. All ranks must add tensors
  // of the same sizes in the same order.
  absl::Status Add(const at::Tensor& grad);

  // Launches the partly filled buckets, waits for every reduction and, in kAllReduce mode, writes
  // the results back into the tensors given to Add. Returns the first error. The next Add()
  // starts a new round (e.g. the next step) and forgets this one's buckets.
  absl::Status Finish();

  // The buckets in launch order, complete after Finish() and kept until the next round starts.
  const std::vector<ReducedBucket>& buckets() const { return done_; }

 private:
  struct OpenBucket {
    at::Tensor buffer;
    int64_t used = 0;
    std::vector<BucketEntry> entries;
  };

  void Launch(OpenBucket& bucket);

  ProcessGroup* group_;
  BucketOptions options_;
  std::vector<at::Tensor> added_;
  std::map<at::ScalarType, OpenBucket> open_;
  std::vector<ReducedBucket> done_;
  std::vector<Work> pending_;
  bool finished_ = false;
};

}  // namespace zerotrain::comm

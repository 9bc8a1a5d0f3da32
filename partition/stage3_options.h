// Stage3Options: the knobs of ZeRO stage 3's parameter gathering (partition/sharded_params.h),
// named after DeepSpeed's stage3_* keys, in elements. A header of its own so that option structs
// can hold it without LibTorch.
#pragma once

#include <cstdint>
#include <limits>

namespace zerotrain::partition {

struct Stage3Options {
  int64_t prefetch_numel = 50000000;        // stage3_prefetch_bucket_size; 0 = no prefetch
  int64_t max_live_numel = 1000000000;      // stage3_max_live_parameters
  int64_t max_reuse_distance = 1000000000;  // stage3_max_reuse_distance
  // stage3_param_persistence_threshold, applied to a submodule's parameters together (they are
  // gathered together): a submodule holding at most this many elements stays whole on every rank.
  int64_t persistence_threshold = 100000;
  // stage3_model_persistence_threshold: at most this many elements stay whole in all.
  int64_t model_persistence_threshold = std::numeric_limits<int64_t>::max();
};

}  // namespace zerotrain::partition

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
  // zero_quantized_weights (ZeRO++ qwZ): the forward's and backward's gathers travel as INT8
  // blocks (comm/quantized_all_gather.h), so the layers compute with weights dequantized from
  // them. The shard, the master weights, the persistent segments and GatheredParameters stay
  // exact.
  bool quantize_weights = false;
  // zero_hpz_partition_size (ZeRO++ hpZ), k > 1: the first gather of a segment after the shard
  // changed (the forward's) keeps a secondary copy sharded over k consecutive ranks (a node);
  // later gathers (the backward's) gather from it within those k ranks only. The same values as
  // the primary gather gave, so training is unchanged; each rank holds 1/k of the gathered
  // parameters more until the next step.
  int hpz_partition_size = 1;
};

}  // namespace zerotrain::partition

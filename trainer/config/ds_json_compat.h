// DeepSpeed compatibility rewrites applied to a ds_config.json tree before it is checked against
// TrainerConfigProto: old spellings DeepSpeed still accepts (or, for aio.thread_count, used to).
// What zerotrain does with DeepSpeed's other keys is the table in ds_keys.h.
#pragma once

#include <google/protobuf/struct.pb.h>

#include <string>
#include <vector>

#include "absl/status/status.h"

namespace zerotrain::trainer {

// bfloat16 → bf16; zero_optimization: true|false|<stage> (with top-level allgather_size);
// zero_optimization.cpu_offload / cpu_offload_param(s) / cpu_offload_use_pin_memory →
// offload_optimizer / offload_param; stage3_gather_fp16_weights_on_model_save → its 16bit name;
// aio.thread_count → aio.intra_op_parallelism. One warning per rewrite.
absl::Status RewriteDeprecatedKeys(const std::string& file, google::protobuf::Struct* root,
                                   std::vector<std::string>* warnings);

}  // namespace zerotrain::trainer

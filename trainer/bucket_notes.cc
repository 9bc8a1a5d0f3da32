// WholeModelBufferNotes (see bucket_notes.h).
#include "trainer/bucket_notes.h"

#include <algorithm>

#include "absl/strings/str_format.h"

namespace zerotrain::trainer {
namespace {

// DeepSpeed 0.19.8's defaults (the conformance suite holds ours to them).
constexpr int64_t kBucketDefault = 500000000;
constexpr int64_t kPrefetchDefault = 50000000;
constexpr int64_t kLiveDefault = 1000000000;

std::string Note(const char* key, int64_t value, int64_t params, int element_bytes,
                 const char* what) {
  const double mib = static_cast<double>(std::min(value, params)) * element_bytes / (1 << 20);
  return absl::StrFormat(
      "zero_optimization.%s is DeepSpeed's default %d elements, more than this model's %d "
      "parameters: %s, %.1f MiB per rank at once; kept as DeepSpeed has it, set it lower "
      "(e.g. %d) to bound that",
      key, value, params, what, mib, std::max<int64_t>(1, params / 8));
}

}  // namespace

std::vector<std::string> WholeModelBufferNotes(const engine::EngineOptions& o, int64_t params) {
  std::vector<std::string> notes;
  // Buckets hold the model's own dtype: 2 bytes under bf16/fp16, 4 in fp32.
  const int bytes = o.precision == engine::Precision::kFloat32 ? 4 : 2;
  if (o.reduce_bucket_size == kBucketDefault && kBucketDefault >= params) {
    notes.push_back(Note("reduce_bucket_size", o.reduce_bucket_size, params, bytes,
                         "every gradient is reduced in one bucket"));
  }
  if (o.stage >= 1 && o.stage <= 2 && o.allgather_bucket_size == kBucketDefault &&
      kBucketDefault >= params) {
    notes.push_back(Note("allgather_bucket_size", o.allgather_bucket_size, params, bytes,
                         "the updated parameters are all-gathered in one piece"));
  }
  if (o.stage == 3 && o.stage3.prefetch_numel == kPrefetchDefault && kPrefetchDefault >= params) {
    notes.push_back(Note("stage3_prefetch_bucket_size", o.stage3.prefetch_numel, params, bytes,
                         "the forward may prefetch every parameter"));
  }
  if (o.stage == 3 && o.stage3.max_live_numel == kLiveDefault && kLiveDefault >= params) {
    notes.push_back(Note("stage3_max_live_parameters", o.stage3.max_live_numel, params, bytes,
                         "every parameter may be gathered whole at once"));
  }
  return notes;
}

}  // namespace zerotrain::trainer

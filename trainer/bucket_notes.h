// DeepSpeed sizes its bucket defaults for models of billions of parameters; under them a smaller
// model's whole gradient or parameter set sits in one buffer. zerotrain keeps DeepSpeed's defaults
// (its configs must mean what they mean there) but says so once at start-up, naming the key and
// the memory it costs, as the advisor names what a choice costs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/engine_options.h"

namespace zerotrain::trainer {

// One line per buffer that DeepSpeed's default of its key makes whole-model-sized for a model of
// `params` parameters: reduce_bucket_size (every stage), allgather_bucket_size (stages 1-2),
// stage3_prefetch_bucket_size and stage3_max_live_parameters (stage 3). A key set to another
// value, or a model larger than the buffer, gives no line.
std::vector<std::string> WholeModelBufferNotes(const engine::EngineOptions& o, int64_t params);

}  // namespace zerotrain::trainer

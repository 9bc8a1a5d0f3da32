// A CUDA out-of-memory error as //trainer:main reports it: one line naming the rank and its device,
// the part of the run that ran out, the ZeRO stage, the bytes LibTorch tried to allocate, and the
// config changes that make room, instead of LibTorch's allocator dump from deep inside a forward.
// The error reaches the trainer as text (c10::OutOfMemoryError's message, or the engine's
// absl::InternalError carrying it), so this works on messages.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "trainer/config/config_validate.h"

namespace zerotrain::trainer {

// LibTorch's "CUDA out of memory. Tried to allocate ..." anywhere in `message`.
bool IsCudaOutOfMemory(std::string_view message);

// The size after "Tried to allocate " ("2.00 GiB", "20.00 MiB", "512 bytes") in bytes; nullopt
// when the message names none.
std::optional<int64_t> RequestedBytes(std::string_view message);

// The part of a run an error came from.
enum class RunPhase { kSetup, kForward, kBackward, kStep, kEval, kCheckpoint, kSample };
const char* RunPhaseName(RunPhase phase);  // "the forward pass", "the optimizer step", ...

// The line for an out-of-memory `message` on `rank` during `phase`. The suggestions follow the
// phase: where activations are what grows (forward, backward, eval, the sample) checkpointing and
// a smaller micro batch come first; then the next rung of the advisor's ladder of stages and
// offload (docs/ADVISOR.md). Never contains a newline.
std::string OutOfMemoryLine(const TrainerConfig& config, int rank, RunPhase phase,
                            std::string_view message);

}  // namespace zerotrain::trainer

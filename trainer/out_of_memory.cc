// The trainer's out-of-memory line (out_of_memory.h).
#include "trainer/out_of_memory.h"

#include <cctype>
#include <cmath>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "trainer/advisor/advisor.h"

namespace zerotrain::trainer {
namespace {

constexpr std::string_view kCudaOom = "CUDA out of memory";
constexpr std::string_view kTried = "Tried to allocate ";

struct Size {
  std::string text;  // as LibTorch wrote it, "2.00 GiB"
  int64_t bytes = 0;
};

// "<number> <unit>" at the start of `s`, in LibTorch's format_size units.
std::optional<Size> ParseSize(std::string_view s) {
  size_t i = 0;
  while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.')) ++i;
  if (i == 0 || i + 1 >= s.size() || s[i] != ' ') return std::nullopt;
  size_t j = i + 1;
  while (j < s.size() && std::isalpha(static_cast<unsigned char>(s[j]))) ++j;
  double value = 0;
  // absl::string_view is its own type in this Abseil, not std::string_view.
  if (!absl::SimpleAtod(absl::string_view(s.data(), i), &value)) return std::nullopt;
  const std::string_view unit = s.substr(i + 1, j - i - 1);
  static constexpr std::pair<std::string_view, double> kUnits[] = {
      {"bytes", 1.0},
      {"B", 1.0},
      {"KiB", 1024.0},
      {"MiB", 1024.0 * 1024},
      {"GiB", 1024.0 * 1024 * 1024},
      {"TiB", 1024.0 * 1024 * 1024 * 1024},
  };
  for (const auto& [name, scale] : kUnits) {
    if (unit == name) return Size{std::string(s.substr(0, j)), std::llround(value * scale)};
  }
  return std::nullopt;
}

std::optional<Size> SizeAfter(std::string_view message, std::string_view marker) {
  const size_t at = message.find(marker);
  if (at == std::string_view::npos) return std::nullopt;
  return ParseSize(message.substr(at + marker.size()));
}

// Where activations are the growing part: checkpoint more blocks, then halve the micro batch and
// accumulate instead, which keeps the batch (and so the run's maths) the same.
std::vector<std::string> ActivationAdvice(const TrainerConfig& c) {
  std::vector<std::string> out;
  const models::ModelOptions& m = c.model;
  if (m.checkpoint_every == 0) {
    out.push_back("activation checkpointing (model.checkpoint_every: 1)");
  } else if (m.checkpoint_every > 1) {
    out.push_back(absl::StrCat("checkpointing every block (model.checkpoint_every: 1, now ",
                               m.checkpoint_every, ")"));
  } else if (!m.cpu_checkpointing) {
    out.push_back(
        "the checkpointed activations in host memory "
        "(activation_checkpointing.cpu_checkpointing: true)");
  }
  const int64_t micro = c.batch.micro_batch_size;
  if (micro > 1) {
    int64_t smaller = micro / 2;
    while (micro % smaller != 0) --smaller;
    out.push_back(absl::StrCat("a smaller micro batch (train_micro_batch_size_per_gpu: ", smaller,
                               " with gradient_accumulation_steps: ",
                               c.batch.gradient_accumulation_steps * (micro / smaller),
                               " keeps the batch of ", c.batch.train_batch_size, ")"));
  }
  return out;
}

// The next rung of the advisor's ladder (stage 0/1 -> 2 -> + optimizer offload -> stage 3 ->
// + parameter offload -> NVMe), named as the advisor names it, with the keys to set.
std::optional<std::string> ModelStateAdvice(const engine::EngineOptions& e) {
  using engine::OffloadDevice;
  int stage = e.stage;
  OffloadDevice opt = e.offload_optimizer.device, param = e.offload_param.device;
  std::vector<std::string> keys;
  if (stage < 2) {
    stage = 2;
    keys.push_back("zero_optimization.stage: 2");
  } else if (opt == OffloadDevice::kNone) {
    opt = OffloadDevice::kCpu;
    keys.push_back("zero_optimization.offload_optimizer.device: \"cpu\"");
  } else if (stage == 2) {
    stage = 3;
    keys.push_back("zero_optimization.stage: 3");
  } else if (param == OffloadDevice::kNone) {
    param = OffloadDevice::kCpu;
    keys.push_back("zero_optimization.offload_param.device: \"cpu\"");
  } else if (opt == OffloadDevice::kCpu || param == OffloadDevice::kCpu) {
    for (auto [device, section] :
         {std::pair<OffloadDevice*, const char*>{&opt, "offload_optimizer"},
          {&param, "offload_param"}}) {
      if (*device != OffloadDevice::kCpu) continue;
      *device = OffloadDevice::kNvme;
      keys.push_back(
          absl::StrCat("zero_optimization.", section, ".device: \"nvme\" with a nvme_path"));
    }
  } else {
    return std::nullopt;  // stage 3 with everything on NVMe: nothing left to move off the GPU
  }
  const advisor::Offload offload = opt == OffloadDevice::kNone ? advisor::Offload::kNone
                                   : param == OffloadDevice::kNone
                                       ? advisor::Offload::kOptimizer
                                       : advisor::Offload::kOptimizerAndParams;
  const bool nvme = opt == OffloadDevice::kNvme || param == OffloadDevice::kNvme;
  return absl::StrCat(advisor::ConfigurationName(stage, offload, nvme), " (",
                      absl::StrJoin(keys, ", "), ")");
}

}  // namespace

bool IsCudaOutOfMemory(std::string_view message) {
  return message.find(kCudaOom) != std::string_view::npos;
}

std::optional<int64_t> RequestedBytes(std::string_view message) {
  std::optional<Size> size = SizeAfter(message, kTried);
  if (!size) return std::nullopt;
  return size->bytes;
}

const char* RunPhaseName(RunPhase phase) {
  switch (phase) {
    case RunPhase::kSetup:
      return "the engine's set-up";
    case RunPhase::kForward:
      return "the forward pass";
    case RunPhase::kBackward:
      return "the backward pass";
    case RunPhase::kStep:
      return "the optimizer step";
    case RunPhase::kEval:
      return "evaluation";
    case RunPhase::kCheckpoint:
      return "a checkpoint save or load";
    case RunPhase::kSample:
      break;
  }
  return "the generated sample";
}

std::string OutOfMemoryLine(const TrainerConfig& config, int rank, RunPhase phase,
                            std::string_view message) {
  std::string line =
      absl::StrCat("out of CUDA memory on rank ", rank, " (", config.engine.device.str(), ") in ",
                   RunPhaseName(phase), " at ZeRO stage ", config.engine.stage, ": ");
  if (std::optional<Size> tried = SizeAfter(message, kTried)) {
    absl::StrAppend(&line, "tried to allocate ", tried->text, " (", tried->bytes, " bytes)");
  } else {
    absl::StrAppend(&line, "LibTorch did not say how much it tried to allocate");
  }
  const std::optional<Size> total = SizeAfter(message, "total capacity of ");
  const std::optional<Size> free = SizeAfter(message, " of which ");
  if (total && free) absl::StrAppend(&line, " with ", free->text, " free of ", total->text);
  const bool activations = phase == RunPhase::kForward || phase == RunPhase::kBackward ||
                           phase == RunPhase::kEval || phase == RunPhase::kSample;
  std::vector<std::string> advice;
  if (activations) advice = ActivationAdvice(config);
  if (std::optional<std::string> states = ModelStateAdvice(config.engine)) {
    advice.push_back(*states);
  }
  if (!activations) {
    for (std::string& a : ActivationAdvice(config)) advice.push_back(std::move(a));
  }
  if (config.engine.stage > 0) {
    advice.push_back("more GPUs (ZeRO divides the sharded states by the number of ranks)");
  }
  absl::StrAppend(&line, ". To fit, try: ", absl::StrJoin(advice, "; "),
                  ". --estimate_memory compares the stages' model-state memory");
  return line;
}

}  // namespace zerotrain::trainer

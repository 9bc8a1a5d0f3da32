// ModelOptions: the trainer's `model { }` section for every family it builds (GPT-2, Llama), and
// MakeModel, which builds the family's module behind the CausalLm interface. The trainer, the
// memory advisor and the reports read the shared sizes from here, whatever the family.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "models/gpt_options.h"
#include "models/llama_options.h"
#include "models/resnet_options.h"
#include "models/submodule_hook.h"

namespace zerotrain::models {

class TrainerModel;  // causal_lm.h

enum class ModelFamily {
  kGpt2,    // Gpt (gpt.h): learned positions, LayerNorm, GELU MLP, tied output
  kLlama,   // Llama (llama.h): rotary positions, RMSNorm, SwiGLU MLP, grouped-query attention
  kResNet,  // ResNet (resnet.h): an image classifier, ResNet-18 or ResNet-50
};

// "gpt2", "llama" or "resnet18"/"resnet50" (depth from options), as model.name takes them.
const char* ModelFamilyName(ModelFamily family);
struct ModelOptions;
std::string ModelName(const ModelOptions& options);

struct ModelOptions {
  ModelFamily family = ModelFamily::kGpt2;
  // model.name as the config writes it ("gpt" and "gpt2" are one family), for messages; "" = the
  // family's own name.
  std::string name;
  // Both families; the defaults are GptOptions'.
  int64_t vocab_size = GptOptions().vocab_size;
  int64_t block_size = GptOptions().block_size;
  int64_t n_layer = GptOptions().n_layer;
  int64_t n_head = GptOptions().n_head;
  int64_t n_embd = GptOptions().n_embd;
  int64_t checkpoint_every = 0;
  bool cpu_checkpointing = false;
  bool profile_checkpointing = false;
  // GPT-2 only.
  double dropout = 0.0;
  bool gelu_tanh = false;  // GPT-2's "gelu_new", which Hugging Face's GPT-2 weights expect
  // Llama only (LlamaOptions' meaning; 0 = derived).
  int64_t n_kv_head = 0;
  int64_t intermediate_size = 0;
  double rope_theta = 10000.0;
  double rms_norm_eps = 1e-5;
  bool tie_word_embeddings = false;
  // ResNet only: 18 or 50, and the classes (vocab_size and block_size do not apply).
  int64_t depth = 18;
  int64_t num_classes = 10;
  // A Hugging Face checkpoint (directory or file) whose weights replace the initial ones; ""
  // = random initialisation (hf_weights.h).
  std::string init_from;
};

GptOptions ToGptOptions(const ModelOptions& options);
ResNetOptions ToResNetOptions(const ModelOptions& options);
LlamaOptions ToLlamaOptions(const ModelOptions& options);

// The family's own checks, naming the field (model.<field>) and value; fields of the other
// family must keep their defaults.
absl::Status ValidateModelOptions(const ModelOptions& options);

// Trainable parameters (tied weights once), and the biggest single submodule's: what the memory
// advisor needs.
int64_t ModelParameterCount(const ModelOptions& options);
int64_t LargestLayerParameterCount(const ModelOptions& options);

// The tokens one training sample carries (block_size for the language models, 1 image for a
// classifier): what tokens-per-second counts.
int64_t TokensPerSample(const ModelOptions& options);

// Validates and builds the family's module (a CausalLm for the language models); after_submodule as
// GptOptions describes it (ZeRO stage 3's partitioned construction). LibTorch errors become a
// Status.
absl::StatusOr<std::shared_ptr<TrainerModel>> MakeModel(
    const ModelOptions& options, const SubmoduleHook& after_submodule = nullptr);

}  // namespace zerotrain::models

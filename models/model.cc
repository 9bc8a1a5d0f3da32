// Building the configured family, its checks and its parameter counts (model.h).
#include "models/model.h"

#include <algorithm>
#include <exception>

#include "absl/strings/str_cat.h"
#include "models/causal_lm.h"
#include "models/gpt.h"
#include "models/llama.h"
#include "models/resnet.h"

namespace zerotrain::models {
namespace {

// A field the other family does not have must not be set, so a config never means something
// it does not do.
absl::Status NotForFamily(const ModelOptions& o, const char* field, bool is_default) {
  if (is_default) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("model.", field, " does not apply to model.name \"", ModelName(o), "\""));
}

}  // namespace

const char* ModelFamilyName(ModelFamily family) {
  switch (family) {
    case ModelFamily::kLlama:
      return "llama";
    case ModelFamily::kResNet:
      return "resnet";
    case ModelFamily::kGpt2:
      break;
  }
  return "gpt2";
}

std::string ModelName(const ModelOptions& o) {
  if (!o.name.empty()) return o.name;
  if (o.family == ModelFamily::kResNet) return absl::StrCat("resnet", o.depth);
  return ModelFamilyName(o.family);
}

ResNetOptions ToResNetOptions(const ModelOptions& o) {
  ResNetOptions r;
  r.depth = o.depth;
  r.num_classes = o.num_classes;
  r.checkpoint_every = o.checkpoint_every;
  r.cpu_checkpointing = o.cpu_checkpointing;
  return r;
}

int64_t TokensPerSample(const ModelOptions& o) {
  return o.family == ModelFamily::kResNet ? 1 : o.block_size;
}

GptOptions ToGptOptions(const ModelOptions& o) {
  GptOptions g;
  g.vocab_size = o.vocab_size;
  g.block_size = o.block_size;
  g.n_layer = o.n_layer;
  g.n_head = o.n_head;
  g.n_embd = o.n_embd;
  g.dropout = o.dropout;
  g.gelu_tanh = o.gelu_tanh;
  g.checkpoint_every = o.checkpoint_every;
  g.cpu_checkpointing = o.cpu_checkpointing;
  g.profile_checkpointing = o.profile_checkpointing;
  return g;
}

LlamaOptions ToLlamaOptions(const ModelOptions& o) {
  LlamaOptions l;
  l.vocab_size = o.vocab_size;
  l.block_size = o.block_size;
  l.n_layer = o.n_layer;
  l.n_head = o.n_head;
  l.n_kv_head = o.n_kv_head;
  l.n_embd = o.n_embd;
  l.intermediate_size = o.intermediate_size;
  l.rope_theta = o.rope_theta;
  l.rms_norm_eps = o.rms_norm_eps;
  l.tie_word_embeddings = o.tie_word_embeddings;
  l.checkpoint_every = o.checkpoint_every;
  l.cpu_checkpointing = o.cpu_checkpointing;
  l.profile_checkpointing = o.profile_checkpointing;
  return l;
}

absl::Status ValidateModelOptions(const ModelOptions& o) {
  const ModelOptions d;
  if (o.family != ModelFamily::kResNet) {
    for (absl::Status s : {NotForFamily(o, "num_classes", o.num_classes == d.num_classes),
                           NotForFamily(o, "depth", o.depth == d.depth)}) {
      if (!s.ok()) return s;
    }
  }
  if (o.family == ModelFamily::kResNet) {
    for (absl::Status s : {NotForFamily(o, "dropout", o.dropout == d.dropout),
                           NotForFamily(o, "gelu_tanh", o.gelu_tanh == d.gelu_tanh),
                           NotForFamily(o, "n_kv_head", o.n_kv_head == d.n_kv_head),
                           NotForFamily(o, "rope_theta", o.rope_theta == d.rope_theta),
                           NotForFamily(o, "init_from", o.init_from.empty())}) {
      if (!s.ok()) return s;
    }
    return ValidateResNetOptions(ToResNetOptions(o));
  }
  if (o.family == ModelFamily::kGpt2) {
    for (absl::Status s :
         {NotForFamily(o, "n_kv_head", o.n_kv_head == d.n_kv_head),
          NotForFamily(o, "intermediate_size", o.intermediate_size == d.intermediate_size),
          NotForFamily(o, "rope_theta", o.rope_theta == d.rope_theta),
          NotForFamily(o, "rms_norm_eps", o.rms_norm_eps == d.rms_norm_eps),
          NotForFamily(o, "tie_word_embeddings", o.tie_word_embeddings == d.tie_word_embeddings)}) {
      if (!s.ok()) return s;
    }
    return ValidateGptOptions(ToGptOptions(o));
  }
  for (absl::Status s : {NotForFamily(o, "dropout", o.dropout == d.dropout),
                         NotForFamily(o, "gelu_tanh", o.gelu_tanh == d.gelu_tanh)}) {
    if (!s.ok()) return s;
  }
  return ValidateLlamaOptions(ToLlamaOptions(o));
}

int64_t ModelParameterCount(const ModelOptions& o) {
  if (o.family == ModelFamily::kResNet) return ResNetParameterCount(ToResNetOptions(o));
  return o.family == ModelFamily::kLlama ? LlamaParameterCount(ToLlamaOptions(o))
                                         : GptParameterCount(ToGptOptions(o));
}

int64_t LargestLayerParameterCount(const ModelOptions& o) {
  if (o.family == ModelFamily::kResNet) {
    // layer4's 3x3 convolutions, or fc.
    return std::max<int64_t>(512 * 512 * 9, (o.depth == 50 ? 2048 : 512) * o.num_classes);
  }
  const int64_t embedding = o.vocab_size * o.n_embd;
  if (o.family == ModelFamily::kGpt2) {
    return std::max(embedding, 4 * o.n_embd * o.n_embd + 4 * o.n_embd);  // the MLP's up matrix
  }
  const int64_t inter =
      o.intermediate_size > 0 ? o.intermediate_size : LlamaDefaultIntermediateSize(o.n_embd);
  return std::max(embedding, inter * o.n_embd);  // one of the MLP's three matrices
}

absl::StatusOr<std::shared_ptr<TrainerModel>> MakeModel(const ModelOptions& options,
                                                        const SubmoduleHook& after_submodule) {
  if (absl::Status s = ValidateModelOptions(options); !s.ok()) return s;
  try {
    if (options.family == ModelFamily::kResNet) {
      ResNetOptions r = ToResNetOptions(options);
      r.after_submodule = after_submodule;
      return std::shared_ptr<TrainerModel>(std::make_shared<ResNet>(r));
    }
    if (options.family == ModelFamily::kLlama) {
      LlamaOptions l = ToLlamaOptions(options);
      l.after_submodule = after_submodule;
      return std::shared_ptr<TrainerModel>(std::make_shared<Llama>(l));
    }
    GptOptions g = ToGptOptions(options);
    g.after_submodule = after_submodule;
    return std::shared_ptr<TrainerModel>(std::make_shared<Gpt>(g));
  } catch (const std::exception& e) {
    return absl::InternalError(
        absl::StrCat("building the ", ModelFamilyName(options.family), " model: ", e.what()));
  }
}

}  // namespace zerotrain::models

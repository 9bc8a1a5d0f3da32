// Writing a Hugging Face checkpoint (hf_export.h).
#include "hf/hf_export.h"

#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "checkpoint/atomic_file.h"
#include "checkpoint/json_value.h"
#include "hf/safetensors.h"
#include "tools/status_macros.h"

namespace zerotrain::hf {
namespace {

using checkpoint::JsonValue;

JsonValue Gpt2Config(const models::ModelOptions& o) {
  JsonValue c = JsonValue::MakeObject();
  c.Add("architectures", JsonValue::MakeArray({JsonValue::String("GPT2LMHeadModel")}));
  c.Add("model_type", JsonValue::String("gpt2"));
  c.Add("vocab_size", JsonValue::Int(o.vocab_size));
  c.Add("n_positions", JsonValue::Int(o.block_size));
  c.Add("n_ctx", JsonValue::Int(o.block_size));
  c.Add("n_embd", JsonValue::Int(o.n_embd));
  c.Add("n_layer", JsonValue::Int(o.n_layer));
  c.Add("n_head", JsonValue::Int(o.n_head));
  c.Add("n_inner", JsonValue());
  // transformers' "gelu" is the exact (erf) form, "gelu_new" the tanh approximation.
  c.Add("activation_function", JsonValue::String(o.gelu_tanh ? "gelu_new" : "gelu"));
  c.Add("layer_norm_epsilon", JsonValue::Double(1e-5));
  for (const char* dropout : {"resid_pdrop", "embd_pdrop", "attn_pdrop"}) {
    c.Add(dropout, JsonValue::Double(o.dropout));
  }
  c.Add("tie_word_embeddings", JsonValue::Bool(true));
  return c;
}

JsonValue LlamaConfig(const models::ModelOptions& o) {
  JsonValue c = JsonValue::MakeObject();
  c.Add("architectures", JsonValue::MakeArray({JsonValue::String("LlamaForCausalLM")}));
  c.Add("model_type", JsonValue::String("llama"));
  c.Add("vocab_size", JsonValue::Int(o.vocab_size));
  c.Add("max_position_embeddings", JsonValue::Int(o.block_size));
  c.Add("hidden_size", JsonValue::Int(o.n_embd));
  c.Add("intermediate_size",
        JsonValue::Int(o.intermediate_size > 0 ? o.intermediate_size
                                               : models::LlamaDefaultIntermediateSize(o.n_embd)));
  c.Add("num_hidden_layers", JsonValue::Int(o.n_layer));
  c.Add("num_attention_heads", JsonValue::Int(o.n_head));
  c.Add("num_key_value_heads", JsonValue::Int(o.n_kv_head > 0 ? o.n_kv_head : o.n_head));
  c.Add("head_dim", JsonValue::Int(o.n_embd / o.n_head));
  c.Add("hidden_act", JsonValue::String("silu"));
  c.Add("rms_norm_eps", JsonValue::Double(o.rms_norm_eps));
  c.Add("rope_theta", JsonValue::Double(o.rope_theta));
  c.Add("rope_scaling", JsonValue());
  c.Add("attention_bias", JsonValue::Bool(false));
  c.Add("mlp_bias", JsonValue::Bool(false));
  c.Add("tie_word_embeddings", JsonValue::Bool(o.tie_word_embeddings));
  return c;
}

}  // namespace

std::string HfConfigJson(const models::ModelOptions& options) {
  JsonValue c =
      options.family == models::ModelFamily::kLlama ? LlamaConfig(options) : Gpt2Config(options);
  c.Add("torch_dtype", JsonValue::String("float32"));
  return checkpoint::WriteJson(c, 2) + "\n";
}

std::pair<std::string, bool> HfNameOf(const models::ModelOptions& options,
                                      const std::string& ours) {
  if (options.family == models::ModelFamily::kLlama) return {ours, false};
  const bool conv1d =
      absl::EndsWith(ours, ".attn.c_attn.weight") || absl::EndsWith(ours, ".attn.c_proj.weight") ||
      absl::EndsWith(ours, ".mlp.c_fc.weight") || absl::EndsWith(ours, ".mlp.c_proj.weight");
  return {"transformer." + ours, conv1d};
}

absl::StatusOr<std::vector<std::string>> WriteHfCheckpoint(
    const std::string& dir, const models::ModelOptions& options,
    const std::vector<std::pair<std::string, at::Tensor>>& params, int64_t max_shard_bytes) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    return absl::PermissionDeniedError(absl::StrCat("cannot create ", dir, ": ", ec.message()));
  std::vector<std::pair<std::string, at::Tensor>> named;
  named.reserve(params.size());
  for (const auto& [ours, tensor] : params) {
    const auto [name, transposed] = HfNameOf(options, ours);
    named.emplace_back(name, transposed ? tensor.t() : tensor);
  }
  ZT_ASSIGN_OR_RETURN(std::vector<std::string> files,
                      WriteShardedSafetensors(dir, named, max_shard_bytes, {{"format", "pt"}}));
  const std::string config = dir + "/config.json";
  const std::string text = HfConfigJson(options);
  ZT_ASSIGN_OR_RETURN(checkpoint::AtomicFileWriter writer,
                      checkpoint::AtomicFileWriter::Open(config));
  ZT_RETURN_IF_ERROR(writer.Append(text.data(), static_cast<int64_t>(text.size())));
  ZT_RETURN_IF_ERROR(writer.Commit());
  files.push_back(config);
  return files;
}

}  // namespace zerotrain::hf

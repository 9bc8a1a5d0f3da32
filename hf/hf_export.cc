// Writing a Hugging Face checkpoint (hf_export.h).
#include "hf/hf_export.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "checkpoint/atomic_file.h"
#include "hf/safetensors.h"
#include "json/json_fields.h"
#include "tools/status_macros.h"

namespace zerotrain::hf {
namespace {

using json::Json;

Json Gpt2Config(const models::ModelOptions& o) {
  Json c = Json::object();
  c["architectures"] = Json::array({"GPT2LMHeadModel"});
  c["model_type"] = "gpt2";
  c["vocab_size"] = o.vocab_size;
  c["n_positions"] = o.block_size;
  c["n_ctx"] = o.block_size;
  c["n_embd"] = o.n_embd;
  c["n_layer"] = o.n_layer;
  c["n_head"] = o.n_head;
  c["n_inner"] = nullptr;
  // transformers' "gelu" is the exact (erf) form, "gelu_new" the tanh approximation.
  c["activation_function"] = o.gelu_tanh ? "gelu_new" : "gelu";
  c["layer_norm_epsilon"] = 1e-5;
  for (const char* dropout : {"resid_pdrop", "embd_pdrop", "attn_pdrop"}) {
    c[dropout] = o.dropout;
  }
  c["tie_word_embeddings"] = true;
  return c;
}

Json LlamaConfig(const models::ModelOptions& o) {
  Json c = Json::object();
  c["architectures"] = Json::array({"LlamaForCausalLM"});
  c["model_type"] = "llama";
  c["vocab_size"] = o.vocab_size;
  c["max_position_embeddings"] = o.block_size;
  c["hidden_size"] = o.n_embd;
  c["intermediate_size"] = o.intermediate_size > 0 ? o.intermediate_size
                                                   : models::LlamaDefaultIntermediateSize(o.n_embd);
  c["num_hidden_layers"] = o.n_layer;
  c["num_attention_heads"] = o.n_head;
  c["num_key_value_heads"] = o.n_kv_head > 0 ? o.n_kv_head : o.n_head;
  c["head_dim"] = o.n_embd / o.n_head;
  c["hidden_act"] = "silu";
  c["rms_norm_eps"] = o.rms_norm_eps;
  c["rope_theta"] = o.rope_theta;
  c["rope_scaling"] = nullptr;
  c["attention_bias"] = false;
  c["mlp_bias"] = false;
  c["tie_word_embeddings"] = o.tie_word_embeddings;
  return c;
}

}  // namespace

std::string HfConfigJson(const models::ModelOptions& options) {
  Json c =
      options.family == models::ModelFamily::kLlama ? LlamaConfig(options) : Gpt2Config(options);
  c["torch_dtype"] = "float32";
  return json::Write(c, 2) + "\n";
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

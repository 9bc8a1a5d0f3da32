// Finding a Hugging Face checkpoint's files and reading its config.json (hf_config.h).
#include "hf/hf_config.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "hf/safetensors.h"
#include "json/json_fields.h"
#include "json/strict_json.h"
#include "tools/status_macros.h"

namespace zerotrain::hf {
namespace {

namespace fs = std::filesystem;
using json::Json;

bool IsFile(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}

absl::StatusOr<std::string> ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open it"));
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The value config.json has for `key`, or `fallback` when the key is absent or null (Hugging
// Face writes null for "the default").
template <typename T, typename Get>
absl::StatusOr<T> Optional(const Json& config, const char* key, T fallback, Get get) {
  const auto v = config.find(key);
  if (v == config.end() || v->is_null()) return fallback;
  return get(config, key);
}

absl::Status Unsupported(const std::string& what, const char* key, const std::string& value,
                         const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat(what, ": \"", key, "\" is ", value, ": ", why));
}

absl::Status ParseGpt2(const Json& c, const std::string& what, models::ModelOptions* o) {
  o->family = models::ModelFamily::kGpt2;
  ZT_ASSIGN_OR_RETURN(o->vocab_size, json::GetInt(c, "vocab_size"));
  ZT_ASSIGN_OR_RETURN(o->block_size, json::GetInt(c, "n_positions"));
  ZT_ASSIGN_OR_RETURN(o->n_embd, json::GetInt(c, "n_embd"));
  ZT_ASSIGN_OR_RETURN(o->n_layer, json::GetInt(c, "n_layer"));
  ZT_ASSIGN_OR_RETURN(o->n_head, json::GetInt(c, "n_head"));
  ZT_ASSIGN_OR_RETURN(const std::string act,
                      Optional<std::string>(c, "activation_function", "gelu_new", json::GetString));
  if (act != "gelu_new" && act != "gelu" && act != "gelu_pytorch_tanh") {
    return Unsupported(what, "activation_function", "\"" + act + "\"",
                       "the GPT-2 family has gelu_new, gelu_pytorch_tanh and gelu");
  }
  o->gelu_tanh = act != "gelu";
  ZT_ASSIGN_OR_RETURN(const int64_t inner,
                      Optional<int64_t>(c, "n_inner", 4 * o->n_embd, json::GetInt));
  if (inner != 4 * o->n_embd) {
    return Unsupported(what, "n_inner", absl::StrCat(inner),
                       "the GPT-2 family's MLP is 4 x n_embd");
  }
  ZT_ASSIGN_OR_RETURN(const double eps,
                      Optional<double>(c, "layer_norm_epsilon", 1e-5, json::GetDouble));
  if (eps != 1e-5) {
    return Unsupported(what, "layer_norm_epsilon", absl::StrCat(eps),
                       "the GPT-2 family uses 1e-05");
  }
  ZT_ASSIGN_OR_RETURN(const bool tied,
                      Optional<bool>(c, "tie_word_embeddings", true, json::GetBool));
  if (!tied) return Unsupported(what, "tie_word_embeddings", "false", "GPT-2's output is tied");
  return absl::OkStatus();
}

absl::Status ParseLlama(const Json& c, const std::string& what, models::ModelOptions* o) {
  o->family = models::ModelFamily::kLlama;
  ZT_ASSIGN_OR_RETURN(o->vocab_size, json::GetInt(c, "vocab_size"));
  ZT_ASSIGN_OR_RETURN(o->block_size, json::GetInt(c, "max_position_embeddings"));
  ZT_ASSIGN_OR_RETURN(o->n_embd, json::GetInt(c, "hidden_size"));
  ZT_ASSIGN_OR_RETURN(o->n_layer, json::GetInt(c, "num_hidden_layers"));
  ZT_ASSIGN_OR_RETURN(o->n_head, json::GetInt(c, "num_attention_heads"));
  ZT_ASSIGN_OR_RETURN(o->n_kv_head,
                      Optional<int64_t>(c, "num_key_value_heads", o->n_head, json::GetInt));
  ZT_ASSIGN_OR_RETURN(o->intermediate_size, json::GetInt(c, "intermediate_size"));
  ZT_ASSIGN_OR_RETURN(o->rope_theta, Optional<double>(c, "rope_theta", 10000.0, json::GetDouble));
  ZT_ASSIGN_OR_RETURN(o->rms_norm_eps, Optional<double>(c, "rms_norm_eps", 1e-6, json::GetDouble));
  ZT_ASSIGN_OR_RETURN(o->tie_word_embeddings,
                      Optional<bool>(c, "tie_word_embeddings", false, json::GetBool));
  ZT_ASSIGN_OR_RETURN(const std::string act,
                      Optional<std::string>(c, "hidden_act", "silu", json::GetString));
  if (act != "silu") return Unsupported(what, "hidden_act", "\"" + act + "\"", "Llama's is silu");
  for (const char* key : {"attention_bias", "mlp_bias"}) {
    ZT_ASSIGN_OR_RETURN(const bool bias, Optional<bool>(c, key, false, json::GetBool));
    if (bias) return Unsupported(what, key, "true", "the Llama family here has no biases");
  }
  if (const auto rs = c.find("rope_scaling"); rs != c.end() && !rs->is_null()) {
    return Unsupported(what, "rope_scaling", json::Write(*rs, 0),
                       "scaled rotary embeddings (Llama 3.1's) are not implemented");
  }
  if (o->n_head > 0 && o->n_embd % o->n_head == 0) {
    ZT_ASSIGN_OR_RETURN(const int64_t head_dim,
                        Optional<int64_t>(c, "head_dim", o->n_embd / o->n_head, json::GetInt));
    if (head_dim != o->n_embd / o->n_head) {
      return Unsupported(
          what, "head_dim", absl::StrCat(head_dim),
          absl::StrCat("must be hidden_size / num_attention_heads = ", o->n_embd / o->n_head));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<HfCheckpointFiles> FindHfCheckpoint(const std::string& path) {
  std::error_code ec;
  const fs::path p(path);
  HfCheckpointFiles files;
  fs::path dir = p;
  if (IsFile(p)) {
    dir = p.parent_path();
    const std::string name = p.filename().string();
    if (absl::EndsWith(name, ".index.json")) {
      files.index = path;
    } else if (absl::EndsWith(name, ".safetensors")) {
      files.weight_files = {path};
    } else {
      files.format = HfCheckpointFiles::Format::kTorchSave;
      files.weight_files = {path};
    }
  } else if (!fs::is_directory(p, ec)) {
    return absl::NotFoundError(absl::StrCat("no file or directory ", path));
  } else if (IsFile(p / "model.safetensors.index.json")) {
    files.index = (p / "model.safetensors.index.json").string();
  } else if (IsFile(p / "model.safetensors")) {
    files.weight_files = {(p / "model.safetensors").string()};
  } else if (IsFile(p / "pytorch_model.bin")) {
    files.format = HfCheckpointFiles::Format::kTorchSave;
    files.weight_files = {(p / "pytorch_model.bin").string()};
  } else {
    return absl::NotFoundError(absl::StrCat(
        path, " holds no model.safetensors, model.safetensors.index.json or pytorch_model.bin"));
  }
  if (!files.index.empty()) {
    ZT_ASSIGN_OR_RETURN(const auto map, ReadSafetensorsIndex(files.index));
    for (const auto& [tensor, file] : map) {
      if (std::find(files.weight_files.begin(), files.weight_files.end(), file) ==
          files.weight_files.end()) {
        files.weight_files.push_back(file);
      }
    }
  }
  if (IsFile(dir / "config.json")) files.config_json = (dir / "config.json").string();
  return files;
}

absl::Status ParseHfConfig(const std::string& text, const std::string& what,
                           models::ModelOptions* options) {
  ZT_ASSIGN_OR_RETURN(const Json config, json::ParseStrict(text, what));
  absl::StatusOr<std::string> type = json::GetString(config, "model_type");
  if (!type.ok()) return WithPrefix(type.status(), what + ": ");
  models::ModelOptions parsed = *options;
  absl::Status s;
  if (*type == "gpt2") {
    s = ParseGpt2(config, what, &parsed);
  } else if (*type == "llama") {
    s = ParseLlama(config, what, &parsed);
  } else {
    return Unsupported(what, "model_type", "\"" + *type + "\"", "known: gpt2, llama");
  }
  if (!s.ok()) return absl::StrContains(s.message(), what) ? s : WithPrefix(s, what + ": ");
  *options = parsed;
  return absl::OkStatus();
}

absl::StatusOr<bool> ReadHfArchitecture(const std::string& path, models::ModelOptions* options) {
  ZT_ASSIGN_OR_RETURN(const HfCheckpointFiles files, FindHfCheckpoint(path));
  if (files.config_json.empty()) return false;
  ZT_ASSIGN_OR_RETURN(const std::string text, ReadText(files.config_json));
  ZT_RETURN_IF_ERROR(ParseHfConfig(text, files.config_json, options));
  return true;
}

}  // namespace zerotrain::hf

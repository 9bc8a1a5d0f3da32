// Loading Hugging Face weights (hf_weights.h): the checkpoint's tensors are listed and matched
// against the module's parameters first, so a wrong checkpoint is one error before anything is
// copied; then each tensor is read and copied in turn.
#include "trainer/model/hf_weights.h"

#include <torch/serialize.h>
#include <torch/torch.h>

#include <chrono>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "checkpoint/safetensors.h"
#include "tools/status_macros.h"
#include "trainer/model/hf_config.h"

namespace zerotrain::trainer {
namespace {

// One tensor of the checkpoint: its shape, stored size, and how to read it.
struct SourceTensor {
  std::vector<int64_t> shape;
  int64_t bytes = 0;
  std::function<absl::StatusOr<at::Tensor>()> read;
};
using Sources = std::map<std::string, SourceTensor>;

absl::Status ListSafetensors(const std::vector<std::string>& files, Sources* out) {
  for (const std::string& file : files) {
    ZT_ASSIGN_OR_RETURN(auto header, checkpoint::ReadSafetensorsHeader(file));
    auto shared = std::make_shared<checkpoint::SafetensorsHeader>(std::move(header));
    for (const checkpoint::SafetensorsTensorInfo& t : shared->tensors) {
      std::string name = t.name;
      (*out)[name] = {t.shape, t.end - t.begin,
                      [shared, name] { return checkpoint::ReadSafetensorsTensor(*shared, name); }};
    }
  }
  return absl::OkStatus();
}

absl::Status ListTorchSave(const std::string& file, Sources* out) {
  std::ifstream in(file, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(file, ": cannot open it"));
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  try {
    const c10::IValue loaded = torch::pickle_load(bytes);
    if (!loaded.isGenericDict()) {
      return absl::InvalidArgumentError(
          absl::StrCat(file, ": holds a ", loaded.tagKind(), ", not a state dict"));
    }
    for (const auto& item : loaded.toGenericDict()) {
      if (!item.key().isString() || !item.value().isTensor()) {
        return absl::InvalidArgumentError(
            absl::StrCat(file, ": a state dict maps names to tensors; it holds a ",
                         item.key().tagKind(), " -> ", item.value().tagKind(), " entry"));
      }
      at::Tensor t = item.value().toTensor();
      (*out)[item.key().toStringRef()] = {t.sizes().vec(), t.numel() * t.element_size(),
                                          [t] { return absl::StatusOr<at::Tensor>(t); }};
    }
  } catch (const c10::Error& e) {
    return absl::DataLossError(absl::StrCat(
        file,
        ": not a torch.save state dict this reads (transformers' pytorch_model.bin is; save "
        "dict(model.state_dict()) rather than the OrderedDict): ",
        e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return absl::DataLossError(absl::StrCat(file, ": not a readable torch.save file: ", e.what()));
  }
  return absl::OkStatus();
}

std::string ShapeText(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

// "3 missing (a, b, c)", at most 8 names.
std::string Listed(const char* what, const std::vector<std::string>& names) {
  std::vector<std::string> shown(names.begin(), names.begin() + std::min<size_t>(8, names.size()));
  std::string more = names.size() > 8 ? absl::StrCat(", and ", names.size() - 8, " more") : "";
  return absl::StrCat(names.size(), " ", what, " (", absl::StrJoin(shown, ", "), more, ")");
}

bool EndsWithAny(const std::string& s, std::initializer_list<const char*> suffixes) {
  for (const char* suffix : suffixes) {
    if (absl::EndsWith(s, suffix)) return true;
  }
  return false;
}

}  // namespace

HfTensorName MapHfTensorName(const ModelOptions& options, const std::string& hf_name) {
  HfTensorName n{hf_name};
  if (options.family == ModelFamily::kLlama) {
    n.ignored = absl::EndsWith(hf_name, ".rotary_emb.inv_freq") ||
                (options.tie_word_embeddings && hf_name == "lm_head.weight");
    return n;
  }
  // GPT2LMHeadModel prefixes the body with "transformer."; GPT2Model does not.
  if (absl::StartsWith(n.ours, "transformer.")) n.ours = n.ours.substr(12);
  n.ignored =
      hf_name == "lm_head.weight" || EndsWithAny(hf_name, {".attn.bias", ".attn.masked_bias"});
  n.transposed = EndsWithAny(n.ours, {".attn.c_attn.weight", ".attn.c_proj.weight",
                                      ".mlp.c_fc.weight", ".mlp.c_proj.weight"});
  return n;
}

absl::StatusOr<HfLoadReport> LoadHfWeights(const std::string& path, const ModelOptions& options,
                                           torch::nn::Module& model) {
  const auto start = std::chrono::steady_clock::now();
  ZT_ASSIGN_OR_RETURN(const HfCheckpointFiles files, FindHfCheckpoint(path));
  Sources sources;
  if (files.format == HfCheckpointFiles::Format::kTorchSave) {
    ZT_RETURN_IF_ERROR(ListTorchSave(files.weight_files.front(), &sources));
  } else {
    ZT_RETURN_IF_ERROR(ListSafetensors(files.weight_files, &sources));
  }
  std::map<std::string, at::Tensor> params;
  for (const auto& item : model.named_parameters()) params[item.key()] = item.value();
  std::vector<std::string> unexpected, misshaped;
  std::vector<std::pair<const SourceTensor*, HfTensorName>> plan;
  std::map<std::string, bool> found;
  for (const auto& [hf_name, source] : sources) {
    const HfTensorName n = MapHfTensorName(options, hf_name);
    if (n.ignored) continue;
    auto it = params.find(n.ours);
    if (it == params.end()) {
      unexpected.push_back(hf_name);
      continue;
    }
    std::vector<int64_t> want = it->second.sizes().vec();
    if (n.transposed) std::reverse(want.begin(), want.end());
    if (source.shape != want) {
      misshaped.push_back(absl::StrCat(hf_name, ": ", ShapeText(source.shape),
                                       " where the model has ", ShapeText(want)));
    }
    found[n.ours] = true;
    plan.push_back({&source, n});
  }
  std::vector<std::string> missing;
  for (const auto& [name, p] : params) {
    if (!found.count(name)) missing.push_back(name);
  }
  if (!missing.empty() || !unexpected.empty() || !misshaped.empty()) {
    std::vector<std::string> parts;
    if (!missing.empty()) parts.push_back(Listed("missing", missing));
    if (!unexpected.empty()) parts.push_back(Listed("unexpected", unexpected));
    if (!misshaped.empty()) parts.push_back(Listed("mis-shaped", misshaped));
    return absl::InvalidArgumentError(absl::StrCat("model.init_from ", path, " does not fit the ",
                                                   ModelFamilyName(options.family),
                                                   " model: ", absl::StrJoin(parts, "; ")));
  }
  HfLoadReport report;
  try {
    torch::NoGradGuard no_grad;
    for (const auto& [source, n] : plan) {
      ZT_ASSIGN_OR_RETURN(at::Tensor t, source->read());
      params[n.ours].copy_(n.transposed ? t.t() : t);
      report.tensors += 1;
      report.bytes += source->bytes;
    }
  } catch (const std::exception& e) {
    return absl::InternalError(
        absl::StrCat("model.init_from ", path, ": copying weights: ", e.what()));
  }
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

}  // namespace zerotrain::trainer

// Loading Hugging Face weights (hf_weights.h): the checkpoint's tensors are listed and matched
// against the module's parameters first, so a wrong checkpoint is one error before anything is
// copied; then each tensor is read and copied in turn.
#include "hf/hf_weights.h"

#include <torch/nn/module.h>
#include <torch/serialize.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "hf/hf_config.h"
#include "hf/safetensors.h"
#include "tools/status_macros.h"

namespace zerotrain::hf {
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
    ZT_ASSIGN_OR_RETURN(auto header, ReadSafetensorsHeader(file));
    auto shared = std::make_shared<SafetensorsHeader>(std::move(header));
    for (const SafetensorsTensorInfo& t : shared->tensors) {
      std::string name = t.name;
      (*out)[name] = {t.shape, t.end - t.begin,
                      [shared, name] { return ReadSafetensorsTensor(*shared, name); }};
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

HfTensorName MapHfTensorName(const models::ModelOptions& options, const std::string& hf_name) {
  HfTensorName n{hf_name};
  if (options.family == models::ModelFamily::kLlama) {
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

struct HfWeightsReader::Source {
  std::string hf_name;
  std::string ours;
  bool transposed = false;
  SourceTensor tensor;
};

absl::StatusOr<std::unique_ptr<HfWeightsReader>> HfWeightsReader::Open(
    const std::string& path, const models::ModelOptions& options) {
  std::unique_ptr<HfWeightsReader> r(new HfWeightsReader());
  r->start_ = std::chrono::steady_clock::now();
  r->path_ = path;
  r->options_ = options;
  ZT_ASSIGN_OR_RETURN(const HfCheckpointFiles files, FindHfCheckpoint(path));
  Sources sources;
  if (files.format == HfCheckpointFiles::Format::kTorchSave) {
    ZT_RETURN_IF_ERROR(ListTorchSave(files.weight_files.front(), &sources));
  } else {
    ZT_RETURN_IF_ERROR(ListSafetensors(files.weight_files, &sources));
  }
  for (auto& [hf_name, tensor] : sources) {
    const HfTensorName n = MapHfTensorName(options, hf_name);
    if (n.ignored) continue;
    auto source = std::make_shared<Source>();
    source->hf_name = hf_name;
    source->ours = n.ours;
    source->transposed = n.transposed;
    source->tensor = std::move(tensor);
    if (!r->by_ours_.emplace(n.ours, std::move(source)).second) r->unmapped_.push_back(hf_name);
  }
  return r;
}

absl::Status HfWeightsReader::Load(const std::string& prefix, torch::nn::Module& module,
                                   bool copy) {
  std::vector<std::string> missing, misshaped, unexpected;
  std::vector<std::pair<const Source*, at::Tensor>> plan;
  for (const auto& item : module.named_parameters()) {
    const std::string ours = prefix.empty() ? item.key() : prefix + "." + item.key();
    auto it = by_ours_.find(ours);
    if (it == by_ours_.end()) {
      missing.push_back(ours);
      continue;
    }
    std::vector<int64_t> want = item.value().sizes().vec();
    if (it->second->transposed) std::reverse(want.begin(), want.end());
    if (it->second->tensor.shape != want) {
      misshaped.push_back(absl::StrCat(it->second->hf_name, ": ",
                                       ShapeText(it->second->tensor.shape), " where the model has ",
                                       ShapeText(want)));
    }
    plan.push_back({it->second.get(), item.value()});
  }
  if (prefix.empty()) {
    std::map<std::string, bool> used;
    for (const auto& [source, param] : plan) used[source->hf_name] = true;
    unexpected = unmapped_;
    for (const auto& [ours, source] : by_ours_) {
      if (!used.count(source->hf_name)) unexpected.push_back(source->hf_name);
    }
  }
  if (!missing.empty() || !unexpected.empty() || !misshaped.empty()) {
    std::vector<std::string> parts;
    if (!missing.empty()) parts.push_back(Listed("missing", missing));
    if (!unexpected.empty()) parts.push_back(Listed("unexpected", unexpected));
    if (!misshaped.empty()) parts.push_back(Listed("mis-shaped", misshaped));
    return absl::InvalidArgumentError(absl::StrCat("model.init_from ", path_, " does not fit the ",
                                                   models::ModelFamilyName(options_.family),
                                                   " model: ", absl::StrJoin(parts, "; ")));
  }
  for (const auto& [source, param] : plan) {
    taken_[source->ours] = true;
  }
  if (!copy) return absl::OkStatus();
  try {
    torch::NoGradGuard no_grad;
    for (auto& [source, param] : plan) {
      ZT_ASSIGN_OR_RETURN(at::Tensor t, source->tensor.read());
      param.copy_(source->transposed ? t.t() : t);
      report_.tensors += 1;
      report_.bytes += source->tensor.bytes;
    }
  } catch (const std::exception& e) {
    return absl::InternalError(
        absl::StrCat("model.init_from ", path_, ": copying weights: ", e.what()));
  }
  report_.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  return absl::OkStatus();
}

absl::Status HfWeightsReader::Finish() {
  std::vector<std::string> unexpected = unmapped_;
  for (const auto& [ours, source] : by_ours_) {
    if (!taken_.count(ours)) unexpected.push_back(source->hf_name);
  }
  if (unexpected.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("model.init_from ", path_, " does not fit the ",
                                                 models::ModelFamilyName(options_.family),
                                                 " model: ", Listed("unexpected", unexpected)));
}

absl::StatusOr<HfLoadReport> LoadHfWeights(const std::string& path,
                                           const models::ModelOptions& options,
                                           torch::nn::Module& model) {
  ZT_ASSIGN_OR_RETURN(std::unique_ptr<HfWeightsReader> reader,
                      HfWeightsReader::Open(path, options));
  ZT_RETURN_IF_ERROR(reader->Load("", model));
  ZT_RETURN_IF_ERROR(reader->Finish());
  return reader->report();
}

}  // namespace zerotrain::hf

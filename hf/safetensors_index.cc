// Sharded safetensors checkpoints as transformers writes them (safetensors.h): the index file
// model.safetensors.index.json maps each tensor to the shard file holding it.
#include <set>

#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "checkpoint/atomic_file.h"
#include "checkpoint/json_value.h"
#include "hf/safetensors.h"
#include "hf/safetensors_format.h"
#include "tools/status_macros.h"

namespace zerotrain::hf {
using checkpoint::GetObject;
using checkpoint::JsonKindName;
using checkpoint::JsonValue;
using checkpoint::ParseJson;
using checkpoint::ReadWholeFile;
using checkpoint::WriteFileAtomically;
using checkpoint::WriteJson;

namespace {

constexpr char kIndexName[] = "model.safetensors.index.json";

absl::Status IndexError(const std::string& path, absl::string_view problem) {
  return absl::DataLossError(absl::StrCat("safetensors index ", path, ": ", problem));
}

// The directory part of `path` with its trailing slash, "" for a bare file name.
std::string DirectoryPrefix(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "" : path.substr(0, slash + 1);
}

// A shard name must stay inside the index's directory: the index may come from anywhere.
bool IsSafeRelativePath(const std::string& file) {
  if (file.empty() || file[0] == '/') return false;
  for (const absl::string_view part : absl::StrSplit(file, '/')) {
    if (part.empty() || part == "." || part == "..") return false;
  }
  return true;
}

// huggingface_hub's split: in order, a new shard when the next tensor would pass the limit, and a
// tensor larger than the limit alone in its own shard.
std::vector<std::vector<std::pair<std::string, at::Tensor>>> SplitIntoShards(
    const std::vector<std::pair<std::string, at::Tensor>>& tensors, int64_t max_shard_bytes) {
  std::vector<std::vector<std::pair<std::string, at::Tensor>>> shards;
  std::vector<std::pair<std::string, at::Tensor>> current;
  int64_t current_bytes = 0;
  for (const auto& named : tensors) {
    const int64_t bytes = named.second.defined() ? named.second.nbytes() : 0;
    if (bytes > max_shard_bytes) {
      shards.push_back({named});
      continue;
    }
    if (current_bytes + bytes > max_shard_bytes) {
      shards.push_back(std::move(current));
      current.clear();
      current_bytes = 0;
    }
    current.push_back(named);
    current_bytes += bytes;
  }
  if (!current.empty() || shards.empty()) shards.push_back(std::move(current));
  return shards;
}

}  // namespace

absl::StatusOr<std::map<std::string, std::string>> ReadSafetensorsIndex(
    const std::string& index_json_path) {
  ZT_ASSIGN_OR_RETURN(const std::string text, ReadWholeFile(index_json_path));
  absl::StatusOr<JsonValue> index =
      ParseJson(text, absl::StrCat("safetensors index ", index_json_path));
  if (!index.ok()) return absl::DataLossError(index.status().message());
  if (index->kind() != JsonValue::Kind::kObject) {
    return IndexError(index_json_path,
                      absl::StrCat("is ", JsonKindName(*index), ", expected a JSON object"));
  }
  if (index->Find("metadata") != nullptr) {
    const absl::Status s = GetObject(*index, "metadata").status();
    if (!s.ok()) return IndexError(index_json_path, s.message());
  }
  const absl::StatusOr<const JsonValue::Object*> weight_map = GetObject(*index, "weight_map");
  if (!weight_map.ok()) return IndexError(index_json_path, weight_map.status().message());
  const std::string dir = DirectoryPrefix(index_json_path);
  std::map<std::string, std::string> shard_of;
  for (const auto& [tensor, file] : **weight_map) {
    if (file.kind() != JsonValue::Kind::kString) {
      return IndexError(index_json_path, absl::StrCat("weight_map key \"", tensor, "\" is ",
                                                      JsonKindName(file), ", expected a string"));
    }
    if (!IsSafeRelativePath(file.string_value())) {
      return IndexError(index_json_path,
                        absl::StrCat("weight_map key \"", tensor, "\": shard file \"",
                                     file.string_value(), "\" is not a path inside its directory"));
    }
    shard_of[tensor] = dir + file.string_value();
  }
  return shard_of;
}

absl::StatusOr<std::vector<std::string>> WriteShardedSafetensors(
    const std::string& dir, const std::vector<std::pair<std::string, at::Tensor>>& tensors,
    int64_t max_shard_bytes, const std::map<std::string, std::string>& metadata) {
  if (max_shard_bytes <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("safetensors shards in ", dir, ": max_shard_bytes ", max_shard_bytes));
  }
  std::set<absl::string_view> names;  // WriteSafetensors sees one shard at a time
  for (const auto& [name, tensor] : tensors) {
    if (!names.insert(name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("safetensors shards in ", dir, ": tensor \"", name, "\": duplicate name"));
    }
  }
  const auto shards = SplitIntoShards(tensors, max_shard_bytes);
  const std::string prefix = dir.empty() || dir.back() == '/' ? dir : dir + "/";
  if (shards.size() == 1) {
    ZT_RETURN_IF_ERROR(WriteSafetensors(prefix + "model.safetensors", tensors, metadata));
    return std::vector<std::string>{prefix + "model.safetensors"};
  }
  std::vector<std::string> written;
  JsonValue weight_map = JsonValue::MakeObject();
  std::map<std::string, std::string> file_of;  // sorted, as json.dumps(sort_keys=True) writes
  int64_t total_bytes = 0;
  for (size_t i = 0; i < shards.size(); ++i) {
    const std::string file =
        absl::StrFormat("model-%05d-of-%05d.safetensors", i + 1, shards.size());
    ZT_RETURN_IF_ERROR(WriteSafetensors(prefix + file, shards[i], metadata));
    written.push_back(prefix + file);
    for (const auto& [name, tensor] : shards[i]) {
      file_of[name] = file;
      total_bytes += tensor.nbytes();
    }
  }
  for (const auto& [name, file] : file_of) weight_map.Add(name, JsonValue::String(file));
  JsonValue index_metadata = JsonValue::MakeObject();
  index_metadata.Add("total_size", JsonValue::Int(total_bytes));
  JsonValue index = JsonValue::MakeObject();
  index.Add("metadata", std::move(index_metadata));
  index.Add("weight_map", std::move(weight_map));
  written.push_back(prefix + kIndexName);
  ZT_RETURN_IF_ERROR(WriteFileAtomically(written.back(), WriteJson(index, 2) + "\n"));
  return written;
}

}  // namespace zerotrain::hf

// Sharded safetensors checkpoints as transformers writes them (safetensors.h): the index file
// model.safetensors.index.json maps each tensor to the shard file holding it.
#include <nlohmann/json.hpp>
#include <set>

#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "checkpoint/atomic_file.h"
#include "hf/safetensors.h"
#include "hf/safetensors_format.h"
#include "json/json_fields.h"
#include "json/strict_json.h"
#include "tools/status_macros.h"

namespace zerotrain::hf {
using checkpoint::ReadWholeFile;
using checkpoint::WriteFileAtomically;
using json::Json;
using json::KindName;

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
  absl::StatusOr<Json> index =
      json::ParseStrict(text, absl::StrCat("safetensors index ", index_json_path));
  if (!index.ok()) return absl::DataLossError(index.status().message());
  if (!index->is_object()) {
    return IndexError(index_json_path,
                      absl::StrCat("is ", KindName(*index), ", expected a JSON object"));
  }
  if (index->contains("metadata")) {
    const absl::Status s = json::GetObject(*index, "metadata").status();
    if (!s.ok()) return IndexError(index_json_path, s.message());
  }
  const absl::StatusOr<const Json*> weight_map = json::GetObject(*index, "weight_map");
  if (!weight_map.ok()) return IndexError(index_json_path, weight_map.status().message());
  const std::string dir = DirectoryPrefix(index_json_path);
  std::map<std::string, std::string> shard_of;
  for (const auto& [tensor, file] : (*weight_map)->get_ref<const Json::object_t&>()) {
    if (!file.is_string()) {
      return IndexError(index_json_path, absl::StrCat("weight_map key \"", tensor, "\" is ",
                                                      KindName(file), ", expected a string"));
    }
    const std::string& name = file.get_ref<const std::string&>();
    if (!IsSafeRelativePath(name)) {
      return IndexError(index_json_path,
                        absl::StrCat("weight_map key \"", tensor, "\": shard file \"", name,
                                     "\" is not a path inside its directory"));
    }
    shard_of[tensor] = dir + name;
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
  Json weight_map = Json::object();
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
  for (const auto& [name, file] : file_of) {
    weight_map.get_ref<Json::object_t&>().emplace_back(name, file);  // keys unique: a map's
  }
  Json index = Json::object();
  index["metadata"] = {{"total_size", total_bytes}};
  index["weight_map"] = std::move(weight_map);
  written.push_back(prefix + kIndexName);
  ZT_RETURN_IF_ERROR(WriteFileAtomically(written.back(), json::Write(index, 2) + "\n"));
  return written;
}

}  // namespace zerotrain::hf

// Hugging Face safetensors files (https://github.com/huggingface/safetensors), read and written
// without Python: an 8-byte little-endian header length N, N bytes of JSON naming each tensor's
// dtype, shape and byte range, then the raw little-endian row-major data. Readers fetch one
// tensor, or one element range of it (what a ZeRO stage 3 rank owns), without reading the rest.
// Every error names the file, and the tensor where there is one.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace zerotrain::hf {

struct SafetensorsTensorInfo {
  std::string name;
  at::ScalarType dtype = at::ScalarType::Undefined;
  std::vector<int64_t> shape;
  int64_t begin = 0;  // byte range in the data, which starts at SafetensorsHeader::data_start
  int64_t end = 0;
};

struct SafetensorsHeader {
  std::string path;
  int64_t data_start = 0;                       // 8 + N
  std::vector<SafetensorsTensorInfo> tensors;   // in file order: by begin, then end
  std::map<std::string, std::string> metadata;  // "__metadata__"

  const SafetensorsTensorInfo* Find(absl::string_view name) const;  // nullptr if absent
};

// The dtypes this reads and writes, by safetensors name: F64 F32 F16 BF16 I64 I32 I16 I8 U8 BOOL.
absl::StatusOr<at::ScalarType> SafetensorsDtype(absl::string_view name);
absl::StatusOr<std::string> SafetensorsDtypeName(at::ScalarType dtype);

// Reads and validates the header only (DataLoss errors for a malformed file): its length, JSON,
// dtypes, shapes, byte ranges (each the tensor's size, inside the file, not overlapping) and
// metadata. Gaps between tensors are allowed, as is data after the last one.
absl::StatusOr<SafetensorsHeader> ReadSafetensorsHeader(const std::string& path);

// A new CPU tensor of the tensor's dtype and shape, reading only its bytes; NotFound if absent.
absl::StatusOr<at::Tensor> ReadSafetensorsTensor(const SafetensorsHeader& header,
                                                 absl::string_view name);

// Elements [first, first + count) of the tensor flattened row-major, as a 1-d tensor, reading
// only their bytes; OutOfRange if the range is not inside the tensor.
absl::StatusOr<at::Tensor> ReadSafetensorsElements(const SafetensorsHeader& header,
                                                   absl::string_view name, int64_t first,
                                                   int64_t count);

// Writes `tensors` (any device, any strides) as the Python library does: the header compact
// JSON with "__metadata__" first (when there is metadata), then the tensors by dtype in its order
// I64 F64 F32 I32 BF16 F16 I16 I8 U8 BOOL (larger elements first, which keeps each tensor's data
// aligned to its element size), then by name; the data in that order; the header padded with spaces
// to a multiple of 8. The file appears complete or not at all (atomic_file.h). Duplicate or
// non-UTF-8 names, "__metadata__" as a name, undefined or sparse tensors and other dtypes are
// InvalidArgument errors naming the tensor.
absl::Status WriteSafetensors(const std::string& path,
                              const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                              const std::map<std::string, std::string>& metadata);

// ---- sharded checkpoints, as transformers' save_pretrained writes them

// Reads model.safetensors.index.json ({"metadata": {...}, "weight_map": {tensor: file}}) into
// tensor name -> shard path, the shard's file name taken relative to the index's directory.
// A malformed index, or a shard name leaving that directory, is DataLoss naming index and key.
absl::StatusOr<std::map<std::string, std::string>> ReadSafetensorsIndex(
    const std::string& index_json_path);

// Splits `tensors` into shards as huggingface_hub does (in the given order; a new shard when the
// next tensor would pass max_shard_bytes; a larger tensor alone in its own) and writes them into
// `dir` as model-00001-of-0000N.safetensors with model.safetensors.index.json ({"metadata":
// {"total_size": data bytes}, "weight_map": sorted}) written last, or, when everything fits in one
// shard, as model.safetensors with no index. Returns the paths written, the index last. Files of
// an earlier save with a different shard count are left alone.
absl::StatusOr<std::vector<std::string>> WriteShardedSafetensors(
    const std::string& dir, const std::vector<std::pair<std::string, at::Tensor>>& tensors,
    int64_t max_shard_bytes, const std::map<std::string, std::string>& metadata);

}  // namespace zerotrain::hf

// ReadSafetensorsHeader (safetensors.h): the header is validated in full, since every later read
// is a pread at an offset it gave. What it accepts is what the Python library accepts, except that
// gaps between tensors and bytes after the last one are allowed.
#include <algorithm>
#include <nlohmann/json.hpp>
#include <tuple>

#include "absl/strings/str_join.h"
#include "checkpoint/little_endian.h"
#include "hf/safetensors.h"
#include "hf/safetensors_format.h"
#include "json/json_fields.h"
#include "json/strict_json.h"
#include "tools/status_macros.h"

namespace zerotrain::hf {
using checkpoint::GetLittleEndian;
using json::GetIntArray;
using json::GetString;
using json::Json;
using json::KindName;

namespace {

using safetensors_format::FileError;
using safetensors_format::ReadOnlyFile;
using safetensors_format::TensorError;

std::string ShapeText(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ","), "]");
}

// The JSON of the header (its length checked against the file and the limit).
absl::StatusOr<std::string> ReadHeaderText(const ReadOnlyFile& file, const std::string& path) {
  ZT_ASSIGN_OR_RETURN(const int64_t file_size, file.Size());
  if (file_size < 8) {
    return FileError(
        absl::StatusCode::kDataLoss, path,
        absl::StrCat("file is ", file_size, " bytes, shorter than the 8-byte header length"));
  }
  char length_bytes[8];
  ZT_RETURN_IF_ERROR(file.ReadAt(length_bytes, 8, 0));
  const uint64_t n = GetLittleEndian(length_bytes, 8);
  if (n > static_cast<uint64_t>(safetensors_format::kMaxHeaderBytes)) {
    return FileError(absl::StatusCode::kDataLoss, path,
                     absl::StrCat("header length ", n, " is over the limit of ",
                                  safetensors_format::kMaxHeaderBytes, " bytes"));
  }
  if (n > static_cast<uint64_t>(file_size - 8)) {
    return FileError(
        absl::StatusCode::kDataLoss, path,
        absl::StrCat("header length ", n, " runs past the end of the ", file_size, "-byte file"));
  }
  std::string text(n, '\0');
  ZT_RETURN_IF_ERROR(file.ReadAt(text.data(), static_cast<int64_t>(n), 8));
  return text;
}

absl::Status ParseTensorFields(const Json& entry, SafetensorsTensorInfo* info) {
  if (!entry.is_object()) {
    return absl::DataLossError(absl::StrCat("is ", KindName(entry), ", expected an object"));
  }
  ZT_ASSIGN_OR_RETURN(const std::string dtype_name, GetString(entry, "dtype"));
  const safetensors_format::Dtype* dtype = safetensors_format::FindDtype(dtype_name);
  if (dtype == nullptr) {
    return absl::DataLossError(absl::StrCat("unknown dtype \"", dtype_name, "\""));
  }
  info->dtype = dtype->scalar_type;
  ZT_ASSIGN_OR_RETURN(info->shape, GetIntArray(entry, "shape"));
  for (const int64_t dim : info->shape) {
    if (dim < 0) {
      return absl::DataLossError(
          absl::StrCat("negative dimension in shape ", ShapeText(info->shape)));
    }
  }
  ZT_ASSIGN_OR_RETURN(const std::vector<int64_t> offsets, GetIntArray(entry, "data_offsets"));
  if (offsets.size() != 2 || offsets[0] < 0 || offsets[1] < offsets[0]) {
    return absl::DataLossError(absl::StrCat("data_offsets ", ShapeText(offsets),
                                            " are not two integers 0 <= begin <= end"));
  }
  info->begin = offsets[0];
  info->end = offsets[1];
  int64_t bytes = 0;
  if (!safetensors_format::CheckedProduct(info->shape, &bytes) ||
      __builtin_mul_overflow(bytes, dtype->element_size, &bytes)) {
    return absl::DataLossError(absl::StrCat("shape ", ShapeText(info->shape), " is too large"));
  }
  if (info->end - info->begin != bytes) {
    return absl::DataLossError(absl::StrCat("data_offsets ", ShapeText(offsets), " hold ",
                                            info->end - info->begin, " bytes, but ", dtype_name,
                                            " shape ", ShapeText(info->shape), " takes ", bytes));
  }
  return absl::OkStatus();
}

absl::Status ParseMetadata(const Json& value, std::map<std::string, std::string>* metadata) {
  if (!value.is_object()) {
    return absl::DataLossError(absl::StrCat("is ", KindName(value), ", expected an object"));
  }
  for (const auto& [key, v] : value.get_ref<const Json::object_t&>()) {
    if (!v.is_string()) {
      return absl::DataLossError(
          absl::StrCat("key \"", key, "\" is ", KindName(v), ", expected a string"));
    }
    (*metadata)[key] = v.get<std::string>();
  }
  return absl::OkStatus();
}

// Sorts the tensors into file order and checks that their bytes lie inside the data and apart.
absl::Status CheckByteRanges(int64_t data_bytes, SafetensorsHeader* header) {
  std::vector<SafetensorsTensorInfo>& tensors = header->tensors;
  std::sort(tensors.begin(), tensors.end(), [](const auto& a, const auto& b) {
    return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
  });
  const SafetensorsTensorInfo* last = nullptr;  // the non-empty tensor reaching furthest so far
  for (const SafetensorsTensorInfo& t : tensors) {
    const auto range = [&t] { return absl::StrCat("bytes [", t.begin, ", ", t.end, ")"); };
    if (t.end > data_bytes) {
      return TensorError(
          absl::StatusCode::kDataLoss, header->path, t.name,
          absl::StrCat(range(), " run past the end of the file's ", data_bytes, " data bytes"));
    }
    if (t.begin == t.end) continue;
    if (last != nullptr && t.begin < last->end) {
      return TensorError(absl::StatusCode::kDataLoss, header->path, t.name,
                         absl::StrCat(range(), " overlap tensor \"", last->name, "\"'s [",
                                      last->begin, ", ", last->end, ")"));
    }
    last = &t;
  }
  return absl::OkStatus();
}

}  // namespace

const SafetensorsTensorInfo* SafetensorsHeader::Find(absl::string_view name) const {
  for (const SafetensorsTensorInfo& t : tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

absl::StatusOr<SafetensorsHeader> ReadSafetensorsHeader(const std::string& path) {
  ZT_ASSIGN_OR_RETURN(const ReadOnlyFile file, ReadOnlyFile::Open(path));
  ZT_ASSIGN_OR_RETURN(const std::string text, ReadHeaderText(file, path));
  ZT_ASSIGN_OR_RETURN(const int64_t file_size, file.Size());
  absl::StatusOr<Json> parsed =
      json::ParseStrict(text, absl::StrCat("safetensors file ", path, ": header"));
  if (!parsed.ok()) return absl::DataLossError(parsed.status().message());
  if (!parsed->is_object()) {
    return FileError(absl::StatusCode::kDataLoss, path,
                     absl::StrCat("header is ", KindName(*parsed), ", expected a JSON object"));
  }
  SafetensorsHeader header;
  header.path = path;
  header.data_start = 8 + static_cast<int64_t>(text.size());
  for (const auto& [key, value] : parsed->get_ref<const Json::object_t&>()) {
    if (key == "__metadata__") {
      const absl::Status s = ParseMetadata(value, &header.metadata);
      if (!s.ok()) {
        return FileError(absl::StatusCode::kDataLoss, path,
                         absl::StrCat("__metadata__ ", s.message()));
      }
      continue;
    }
    SafetensorsTensorInfo info;
    info.name = key;
    const absl::Status s = ParseTensorFields(value, &info);
    if (!s.ok()) return TensorError(absl::StatusCode::kDataLoss, path, key, s.message());
    header.tensors.push_back(std::move(info));
  }
  ZT_RETURN_IF_ERROR(CheckByteRanges(file_size - header.data_start, &header));
  return header;
}

}  // namespace zerotrain::hf

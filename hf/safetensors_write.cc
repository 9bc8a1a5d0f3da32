// WriteSafetensors (safetensors.h): everything that could fail for a reason of the caller's is
// checked before the file is opened, and each tensor is copied to contiguous CPU memory only when
// its turn comes, so memory stays near one tensor however large the file.
#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>

#include "checkpoint/atomic_file.h"
#include "checkpoint/little_endian.h"
#include "hf/safetensors.h"
#include "hf/safetensors_format.h"
#include "json/json_fields.h"
#include "tools/status_macros.h"

namespace zerotrain::hf {
using checkpoint::AtomicFileWriter;
using checkpoint::PutLittleEndian;
using json::IsValidUtf8;
using json::Json;

namespace {

using safetensors_format::TensorError;

struct PlannedTensor {
  const std::string* name;
  const at::Tensor* tensor;
  const safetensors_format::Dtype* dtype;
  int64_t bytes;
};

absl::StatusOr<PlannedTensor> PlanTensor(const std::string& path, const std::string& name,
                                         const at::Tensor& t) {
  const auto refuse = [&](absl::string_view problem) {
    return TensorError(absl::StatusCode::kInvalidArgument, path, name, problem);
  };
  if (name == "__metadata__") return refuse("the name is reserved for the metadata");
  if (!IsValidUtf8(name)) return refuse("the name is not valid UTF-8");
  if (!t.defined()) return refuse("undefined tensor");
  if (t.layout() != at::kStrided) return refuse("only dense (strided) tensors can be written");
  const safetensors_format::Dtype* dtype = safetensors_format::FindDtype(t.scalar_type());
  if (dtype == nullptr) {
    return refuse(absl::StrCat("dtype ", c10::toString(t.scalar_type()), " is not supported"));
  }
  return PlannedTensor{&name, &t, dtype, t.numel() * dtype->element_size};
}

// The tensors in the Python library's order: larger dtypes first (by its enum), then by name.
absl::StatusOr<std::vector<PlannedTensor>> PlanTensors(
    const std::string& path, const std::vector<std::pair<std::string, at::Tensor>>& tensors) {
  std::vector<PlannedTensor> plan;
  std::set<absl::string_view> names;
  for (const auto& [name, tensor] : tensors) {
    if (!names.insert(name).second) {
      return TensorError(absl::StatusCode::kInvalidArgument, path, name, "duplicate name");
    }
    ZT_ASSIGN_OR_RETURN(PlannedTensor planned, PlanTensor(path, name, tensor));
    plan.push_back(planned);
  }
  std::sort(plan.begin(), plan.end(), [](const PlannedTensor& a, const PlannedTensor& b) {
    return std::make_tuple(-a.dtype->write_rank, *a.name) <
           std::make_tuple(-b.dtype->write_rank, *b.name);
  });
  return plan;
}

// The 8-byte length and the compact JSON header, padded with spaces to a multiple of 8.
std::string EncodeHeader(const std::vector<PlannedTensor>& plan,
                         const std::map<std::string, std::string>& metadata) {
  Json header = Json::object();
  // Names were checked unique before; appending skips ordered_json's search per insert, which
  // would make a header of many tensors quadratic.
  auto& members = header.get_ref<Json::object_t&>();
  if (!metadata.empty()) members.emplace_back("__metadata__", Json(metadata));
  int64_t offset = 0;
  for (const PlannedTensor& t : plan) {
    Json info = Json::object();
    info["dtype"] = t.dtype->name;
    info["shape"] = t.tensor->sizes().vec();
    info["data_offsets"] = {offset, offset + t.bytes};
    members.emplace_back(*t.name, std::move(info));
    offset += t.bytes;
  }
  std::string text = json::Write(header, 0);
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string encoded;
  PutLittleEndian(&encoded, text.size(), 8);
  return encoded + text;
}

absl::Status AppendTensorData(const std::string& path, const PlannedTensor& t,
                              AtomicFileWriter* file) {
  if (t.bytes == 0) return absl::OkStatus();
  at::Tensor cpu;
  try {
    cpu = t.tensor->to(at::kCPU).contiguous();
  } catch (const std::exception& e) {
    return TensorError(absl::StatusCode::kInternal, path, *t.name,
                       absl::StrCat("cannot copy to contiguous CPU memory: ", e.what()));
  }
  return file->Append(cpu.data_ptr(), t.bytes);
}

}  // namespace

absl::Status WriteSafetensors(const std::string& path,
                              const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                              const std::map<std::string, std::string>& metadata) {
  ZT_ASSIGN_OR_RETURN(const std::vector<PlannedTensor> plan, PlanTensors(path, tensors));
  for (const auto& [key, value] : metadata) {
    if (!IsValidUtf8(key) || !IsValidUtf8(value)) {
      return safetensors_format::FileError(
          absl::StatusCode::kInvalidArgument, path,
          absl::StrCat("metadata key \"", key, "\" or its value is not valid UTF-8"));
    }
  }
  const std::string header = EncodeHeader(plan, metadata);
  if (static_cast<int64_t>(header.size()) - 8 > safetensors_format::kMaxHeaderBytes) {
    return safetensors_format::FileError(
        absl::StatusCode::kInvalidArgument, path,
        absl::StrCat("header of ", header.size() - 8, " bytes is over the readers' limit of ",
                     safetensors_format::kMaxHeaderBytes));
  }
  ZT_ASSIGN_OR_RETURN(AtomicFileWriter file, AtomicFileWriter::Open(path));
  ZT_RETURN_IF_ERROR(file.Append(header.data(), static_cast<int64_t>(header.size())));
  for (const PlannedTensor& t : plan) ZT_RETURN_IF_ERROR(AppendTensorData(path, t, &file));
  return file.Commit();
}

}  // namespace zerotrain::hf

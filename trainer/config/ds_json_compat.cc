// DeepSpeed's deprecated config spellings (ds_json_compat.h). The rewrites follow
// deepspeed/runtime/zero/config.py, runtime/config.py and swap_tensor/aio_config.py (0.19.8).
#include "trainer/config/ds_json_compat.h"

#include "absl/strings/str_cat.h"

namespace zerotrain::trainer {
namespace {

using google::protobuf::Struct;
using google::protobuf::Value;

absl::Status NotBool(const std::string& file, const std::string& path) {
  return absl::InvalidArgumentError(
      absl::StrCat(file, ": ", path, ": expected true or false (a deprecated DeepSpeed key)"));
}

// zero_optimization.cpu_offload(_params): true → <target> {device: "cpu", pin_memory: ...}.
absl::Status RewriteCpuOffload(const std::string& file, Struct* zero, const char* old_key,
                               const char* target, bool pin_memory,
                               std::vector<std::string>* warnings) {
  auto it = zero->fields().find(old_key);
  if (it == zero->fields().end()) return absl::OkStatus();
  const std::string path = absl::StrCat("zero_optimization.", old_key);
  if (it->second.has_null_value()) {  // DeepSpeed's default: not set
    zero->mutable_fields()->erase(old_key);
    return absl::OkStatus();
  }
  if (!it->second.has_bool_value()) return NotBool(file, path);
  const bool on = it->second.bool_value();
  zero->mutable_fields()->erase(old_key);
  if (!on) {
    warnings->push_back(absl::StrCat(file, ": ", path, " is deprecated; false has no effect"));
    return absl::OkStatus();
  }
  if (zero->fields().count(target)) {
    return absl::InvalidArgumentError(absl::StrCat(file, ": ", path, " and zero_optimization.",
                                                   target, " are both set; keep ", target));
  }
  Struct* offload = (*zero->mutable_fields())[target].mutable_struct_value();
  (*offload->mutable_fields())["device"].set_string_value("cpu");
  (*offload->mutable_fields())["pin_memory"].set_bool_value(pin_memory);
  warnings->push_back(absl::StrCat(file, ": ", path, " is deprecated; read as zero_optimization.",
                                   target, ".device \"cpu\""));
  return absl::OkStatus();
}

absl::Status RewriteZero(const std::string& file, Struct* root,
                         std::vector<std::string>* warnings) {
  auto it = root->fields().find("zero_optimization");
  if (it == root->fields().end()) return absl::OkStatus();
  Value& zero = (*root->mutable_fields())["zero_optimization"];
  if (zero.has_bool_value() || zero.has_number_value()) {
    // DeepSpeed's oldest form: a bare flag (true = stage 1) with a top-level allgather_size.
    const double stage = zero.has_bool_value() ? (zero.bool_value() ? 1 : 0) : zero.number_value();
    Struct* section = zero.mutable_struct_value();
    (*section->mutable_fields())["stage"].set_number_value(stage);
    auto size = root->fields().find("allgather_size");
    if (size != root->fields().end()) {
      (*section->mutable_fields())["allgather_bucket_size"] = size->second;
      root->mutable_fields()->erase("allgather_size");
    }
    warnings->push_back(absl::StrCat(file,
                                     ": zero_optimization as a bare value is deprecated; "
                                     "read as zero_optimization.stage ",
                                     stage));
  }
  if (!zero.has_struct_value()) return absl::OkStatus();  // the walk reports the type
  Struct* z = zero.mutable_struct_value();
  bool pin = false;
  auto pin_it = z->fields().find("cpu_offload_use_pin_memory");
  if (pin_it != z->fields().end() && pin_it->second.has_null_value()) {
    z->mutable_fields()->erase("cpu_offload_use_pin_memory");
  } else if (pin_it != z->fields().end()) {
    if (!pin_it->second.has_bool_value()) {
      return NotBool(file, "zero_optimization.cpu_offload_use_pin_memory");
    }
    pin = pin_it->second.bool_value();
    z->mutable_fields()->erase("cpu_offload_use_pin_memory");
    warnings->push_back(absl::StrCat(file,
                                     ": zero_optimization.cpu_offload_use_pin_memory is "
                                     "deprecated; read as the offload sections' pin_memory"));
  }
  if (auto s = RewriteCpuOffload(file, z, "cpu_offload", "offload_optimizer", pin, warnings);
      !s.ok()) {
    return s;
  }
  // 0.19.8 spells it cpu_offload_param; older releases and guides cpu_offload_params.
  for (const char* old_key : {"cpu_offload_param", "cpu_offload_params"}) {
    if (auto s = RewriteCpuOffload(file, z, old_key, "offload_param", pin, warnings); !s.ok()) {
      return s;
    }
  }
  constexpr const char* kOld = "stage3_gather_fp16_weights_on_model_save";
  constexpr const char* kNew = "stage3_gather_16bit_weights_on_model_save";
  auto old = z->fields().find(kOld);
  if (old != z->fields().end()) {
    if (!z->fields().count(kNew)) (*z->mutable_fields())[kNew] = old->second;
    z->mutable_fields()->erase(kOld);
    warnings->push_back(absl::StrCat(file, ": zero_optimization.", kOld,
                                     " is deprecated; read as zero_optimization.", kNew));
  }
  return absl::OkStatus();
}

// aio.thread_count: DeepSpeed's name before intra_op_parallelism. 0.19.8 no longer reads it (its
// swap I/O then runs one lane); zerotrain reads it as the new name, which only sets how many
// lanes of transfers the swap I/O runs, never what is computed.
absl::Status RewriteAio(const std::string& file, Struct* root, std::vector<std::string>* warnings) {
  auto it = root->fields().find("aio");
  if (it == root->fields().end() || !it->second.has_struct_value()) return absl::OkStatus();
  Struct* aio = (*root->mutable_fields())["aio"].mutable_struct_value();
  auto old = aio->fields().find("thread_count");
  if (old == aio->fields().end()) return absl::OkStatus();
  if (aio->fields().count("intra_op_parallelism")) {
    return absl::InvalidArgumentError(
        absl::StrCat(file, ": aio.thread_count and aio.intra_op_parallelism are one setting (",
                     "thread_count is its old name); keep intra_op_parallelism"));
  }
  const Value count = old->second;
  aio->mutable_fields()->erase("thread_count");
  (*aio->mutable_fields())["intra_op_parallelism"] = count;
  warnings->push_back(absl::StrCat(file,
                                   ": aio.thread_count is DeepSpeed's old name (0.19.8 ignores "
                                   "it); read as aio.intra_op_parallelism"));
  return absl::OkStatus();
}

}  // namespace

absl::Status RewriteDeprecatedKeys(const std::string& file, Struct* root,
                                   std::vector<std::string>* warnings) {
  auto bf = root->fields().find("bfloat16");
  if (bf != root->fields().end()) {
    if (root->fields().count("bf16")) {
      warnings->push_back(absl::StrCat(file, ": bfloat16 (deprecated) ignored: bf16 is also set"));
    } else {
      (*root->mutable_fields())["bf16"] = bf->second;
      warnings->push_back(absl::StrCat(file, ": bfloat16 is deprecated; read as bf16"));
    }
    root->mutable_fields()->erase("bfloat16");
  }
  if (absl::Status s = RewriteAio(file, root, warnings); !s.ok()) return s;
  return RewriteZero(file, root, warnings);
}

}  // namespace zerotrain::trainer

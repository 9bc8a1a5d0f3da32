// What the safetensors library's .cc files share: the dtype table, the header size limit, the
// form of an error and a file to pread from. Private to the library.
#pragma once

#include <c10/core/ScalarType.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace zerotrain::hf::safetensors_format {

// Tensor data is copied byte for byte between the file and memory.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors data is little-endian");

struct Dtype {
  const char* name;
  c10::ScalarType scalar_type;
  int element_size;
  // The Rust library's Dtype enum order, by which its writer sorts tensors (largest first).
  int write_rank;
};

inline constexpr Dtype kDtypes[] = {
    {"BOOL", c10::ScalarType::Bool, 1, 0},  {"U8", c10::ScalarType::Byte, 1, 1},
    {"I8", c10::ScalarType::Char, 1, 2},    {"I16", c10::ScalarType::Short, 2, 3},
    {"F16", c10::ScalarType::Half, 2, 4},   {"BF16", c10::ScalarType::BFloat16, 2, 5},
    {"I32", c10::ScalarType::Int, 4, 6},    {"F32", c10::ScalarType::Float, 4, 7},
    {"F64", c10::ScalarType::Double, 8, 8}, {"I64", c10::ScalarType::Long, 8, 9},
};

inline const Dtype* FindDtype(absl::string_view name) {
  for (const Dtype& d : kDtypes) {
    if (name == d.name) return &d;
  }
  return nullptr;
}

inline const Dtype* FindDtype(c10::ScalarType scalar_type) {
  for (const Dtype& d : kDtypes) {
    if (scalar_type == d.scalar_type) return &d;
  }
  return nullptr;
}

// The Python library refuses larger headers, so a larger length is a corrupt file.
constexpr int64_t kMaxHeaderBytes = 100'000'000;

inline absl::Status FileError(absl::StatusCode code, const std::string& path,
                              absl::string_view problem) {
  return absl::Status(code, absl::StrCat("safetensors file ", path, ": ", problem));
}

inline absl::Status TensorError(absl::StatusCode code, const std::string& path,
                                absl::string_view tensor, absl::string_view problem) {
  return FileError(code, path, absl::StrCat("tensor \"", tensor, "\": ", problem));
}

// The product of `factors`, or false when one is negative or the product passes int64.
inline bool CheckedProduct(const std::vector<int64_t>& factors, int64_t* product) {
  *product = 1;
  for (const int64_t f : factors) {
    if (f < 0 || __builtin_mul_overflow(*product, f, product)) return false;
  }
  return true;
}

// An open file, closed when this goes out of scope (safetensors_read.cc).
class ReadOnlyFile {
 public:
  static absl::StatusOr<ReadOnlyFile> Open(const std::string& path);
  ReadOnlyFile(ReadOnlyFile&& o) noexcept : path_(std::move(o.path_)), fd_(o.fd_) { o.fd_ = -1; }
  ReadOnlyFile& operator=(ReadOnlyFile&&) = delete;
  ~ReadOnlyFile();

  absl::StatusOr<int64_t> Size() const;
  // Exactly n bytes at `offset`; DataLoss at the end of the file.
  absl::Status ReadAt(void* out, int64_t n, int64_t offset) const;

 private:
  ReadOnlyFile(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  std::string path_;
  int fd_ = -1;
};

}  // namespace zerotrain::hf::safetensors_format

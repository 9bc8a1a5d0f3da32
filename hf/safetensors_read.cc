// Reading tensors from a safetensors file (safetensors.h) whose header ReadSafetensorsHeader has
// validated: one tensor, or one element range of it, straight into its new tensor's memory.
#include <ATen/ops/empty.h>
#include <c10/util/Exception.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "hf/safetensors.h"
#include "hf/safetensors_format.h"
#include "tools/status_macros.h"

namespace zerotrain::hf {

using safetensors_format::FileError;
using safetensors_format::TensorError;

namespace safetensors_format {

absl::StatusOr<ReadOnlyFile> ReadOnlyFile::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return FileError(errno == ENOENT ? absl::StatusCode::kNotFound : absl::StatusCode::kInternal,
                     path, absl::StrCat("cannot open: ", std::strerror(errno)));
  }
  return ReadOnlyFile(path, fd);
}

ReadOnlyFile::~ReadOnlyFile() {
  if (fd_ >= 0) ::close(fd_);
}

absl::StatusOr<int64_t> ReadOnlyFile::Size() const {
  struct stat st;
  if (::fstat(fd_, &st) != 0) {
    return FileError(absl::StatusCode::kInternal, path_,
                     absl::StrCat("cannot stat: ", std::strerror(errno)));
  }
  return static_cast<int64_t>(st.st_size);
}

// In pieces of at most 1 GiB, which one pread may return less of.
absl::Status ReadOnlyFile::ReadAt(void* out, int64_t n, int64_t offset) const {
  char* p = static_cast<char*>(out);
  while (n > 0) {
    const ssize_t r = ::pread(fd_, p, static_cast<size_t>(std::min<int64_t>(n, 1 << 30)), offset);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      return FileError(absl::StatusCode::kInternal, path_,
                       absl::StrCat("cannot read: ", std::strerror(errno)));
    }
    if (r == 0) {
      return FileError(absl::StatusCode::kDataLoss, path_,
                       absl::StrCat("unexpected end of file at byte ", offset));
    }
    p += r;
    n -= r;
    offset += r;
  }
  return absl::OkStatus();
}

}  // namespace safetensors_format

absl::StatusOr<at::ScalarType> SafetensorsDtype(absl::string_view name) {
  const safetensors_format::Dtype* dtype = safetensors_format::FindDtype(name);
  if (dtype == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("unknown safetensors dtype \"", name, "\""));
  }
  return dtype->scalar_type;
}

absl::StatusOr<std::string> SafetensorsDtypeName(at::ScalarType dtype) {
  const safetensors_format::Dtype* d = safetensors_format::FindDtype(dtype);
  if (d == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("dtype ", c10::toString(dtype), " has no safetensors name here"));
  }
  return std::string(d->name);
}

namespace {

using safetensors_format::ReadOnlyFile;

// Elements [first, first + count) of `info`'s tensor into a new tensor of `shape`; ElementCount
// has checked that the byte arithmetic cannot overflow.
absl::StatusOr<at::Tensor> ReadElements(const SafetensorsHeader& header,
                                        const SafetensorsTensorInfo& info, int64_t first,
                                        int64_t count, const std::vector<int64_t>& shape) {
  const int64_t element_size = safetensors_format::FindDtype(info.dtype)->element_size;
  at::Tensor tensor;
  try {
    tensor = at::empty(shape, at::TensorOptions().dtype(info.dtype));
  } catch (const std::exception& e) {
    return TensorError(absl::StatusCode::kResourceExhausted, header.path, info.name,
                       absl::StrCat("cannot allocate ", count, " elements: ", e.what()));
  }
  const int64_t bytes = count * element_size;
  if (bytes > 0) {
    ZT_ASSIGN_OR_RETURN(const ReadOnlyFile file, ReadOnlyFile::Open(header.path));
    const int64_t offset = header.data_start + info.begin + first * element_size;
    ZT_RETURN_IF_ERROR(file.ReadAt(tensor.data_ptr(), bytes, offset));
  }
  if (info.dtype == at::kBool) {  // any other byte would be an invalid bool in memory
    const uint8_t* p = static_cast<const uint8_t*>(tensor.data_ptr());
    for (int64_t i = 0; i < count; ++i) {
      if (p[i] > 1) {
        return TensorError(
            absl::StatusCode::kDataLoss, header.path, info.name,
            absl::StrCat("BOOL element ", first + i, " is byte ", p[i], ", not 0 or 1"));
      }
    }
  }
  return tensor;
}

// The tensor's element count, its dtype and size checked again: the header is a plain struct its
// holder may have changed since ReadSafetensorsHeader validated it.
absl::StatusOr<int64_t> ElementCount(const SafetensorsHeader& header,
                                     const SafetensorsTensorInfo& info) {
  const safetensors_format::Dtype* dtype = safetensors_format::FindDtype(info.dtype);
  if (dtype == nullptr) {
    return TensorError(absl::StatusCode::kInvalidArgument, header.path, info.name,
                       absl::StrCat("dtype ", c10::toString(info.dtype), " is not supported"));
  }
  int64_t numel = 0;
  int64_t bytes = 0;
  if (!safetensors_format::CheckedProduct(info.shape, &numel) ||
      __builtin_mul_overflow(numel, dtype->element_size, &bytes)) {
    return TensorError(absl::StatusCode::kInvalidArgument, header.path, info.name,
                       "shape has a negative or too large element count");
  }
  return numel;
}

absl::StatusOr<const SafetensorsTensorInfo*> FindTensor(const SafetensorsHeader& header,
                                                        absl::string_view name) {
  const SafetensorsTensorInfo* info = header.Find(name);
  if (info == nullptr) {
    return TensorError(absl::StatusCode::kNotFound, header.path, name, "no such tensor");
  }
  return info;
}

}  // namespace

absl::StatusOr<at::Tensor> ReadSafetensorsTensor(const SafetensorsHeader& header,
                                                 absl::string_view name) {
  ZT_ASSIGN_OR_RETURN(const SafetensorsTensorInfo* info, FindTensor(header, name));
  ZT_ASSIGN_OR_RETURN(const int64_t numel, ElementCount(header, *info));
  return ReadElements(header, *info, 0, numel, info->shape);
}

absl::StatusOr<at::Tensor> ReadSafetensorsElements(const SafetensorsHeader& header,
                                                   absl::string_view name, int64_t first,
                                                   int64_t count) {
  ZT_ASSIGN_OR_RETURN(const SafetensorsTensorInfo* info, FindTensor(header, name));
  ZT_ASSIGN_OR_RETURN(const int64_t numel, ElementCount(header, *info));
  if (first < 0 || count < 0 || first > numel || count > numel - first) {
    return TensorError(absl::StatusCode::kOutOfRange, header.path, name,
                       absl::StrCat("elements from ", first, " (", count,
                                    " of them) are not inside its ", numel, " elements"));
  }
  return ReadElements(header, *info, first, count, {count});
}

}  // namespace zerotrain::hf

// The verifying shard file reader (format in shard_file.h; the writers are in
// shard_file_writer.cc).
#include "checkpoint/shard_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "checkpoint/crc32c.h"
#include "checkpoint/little_endian.h"

namespace zerotrain::checkpoint {
namespace {

absl::Status Corrupt(const std::string& path, const std::string& what) {
  return absl::DataLossError(absl::StrCat("checkpoint shard file ", path, ": ", what));
}

absl::Status PreadFully(int fd, void* out, int64_t n, int64_t offset, const std::string& path) {
  char* p = static_cast<char*>(out);
  while (n > 0) {
    const ssize_t r = ::pread(fd, p, static_cast<size_t>(n), offset);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0)
      return absl::InternalError(absl::StrCat("cannot read ", path, ": ", std::strerror(errno)));
    if (r == 0) return Corrupt(path, "unexpected end of file (truncated?)");
    p += r;
    n -= r;
    offset += r;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ShardFileReader> ShardFileReader::Open(const std::string& path) {
  ShardFileReader r;
  r.path_ = path;
  r.fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (r.fd_ < 0) {
    return absl::Status(errno == ENOENT ? absl::StatusCode::kNotFound : absl::StatusCode::kInternal,
                        absl::StrCat("checkpoint shard file ", path, ": ", std::strerror(errno)));
  }
  struct stat st;
  if (::fstat(r.fd_, &st) != 0) return Corrupt(path, "cannot stat");
  r.file_size_ = st.st_size;
  if (r.file_size_ < kShardHeaderBytes) {
    return Corrupt(path,
                   absl::StrCat("truncated: ", r.file_size_, " bytes, shorter than the header"));
  }
  char h[kShardHeaderBytes];
  absl::Status s = PreadFully(r.fd_, h, kShardHeaderBytes, 0, path);
  if (!s.ok()) return s;
  if (std::memcmp(h, kShardMagic, sizeof(kShardMagic)) != 0)
    return Corrupt(path, "not a shard file (bad magic)");
  const uint32_t version = static_cast<uint32_t>(GetLittleEndian(h + 8, 4));
  if (version > kShardFormatVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        "checkpoint shard file ", path, ": format version ", version,
        " is newer than this build reads (", kShardFormatVersion, "); use a newer zerotrain"));
  }
  if (version == 0) return Corrupt(path, "format version 0");
  r.chunk_bytes_ = static_cast<uint32_t>(GetLittleEndian(h + 12, 4));
  const uint64_t table_bytes = GetLittleEndian(h + 16, 8);
  if (r.chunk_bytes_ == 0) return Corrupt(path, "chunk size 0");
  if (table_bytes > static_cast<uint64_t>(r.file_size_ - kShardHeaderBytes)) {
    return Corrupt(path, absl::StrCat("table of ", table_bytes, " bytes overruns the file of ",
                                      r.file_size_, " bytes (truncated?)"));
  }
  std::string table(table_bytes, '\0');
  s = PreadFully(r.fd_, table.data(), static_cast<int64_t>(table_bytes), kShardHeaderBytes, path);
  if (!s.ok()) return s;
  const uint32_t want = static_cast<uint32_t>(GetLittleEndian(h + 24, 4));
  if (Crc32cExtend(Crc32c(h, 24), table.data(), table.size()) != want) {
    return Corrupt(path, "header checksum mismatch");
  }
  int64_t entries = 0;
  if (version >= 2) {
    auto identity = DecodeIdentity(table, &entries);
    if (!identity.ok()) return Corrupt(path, std::string(identity.status().message()));
    r.identity_ = *std::move(identity);
  }
  s = r.ParseTable(table, entries);
  if (!s.ok()) return s;
  return r;
}

absl::Status ShardFileReader::ParseTable(const std::string& table, int64_t pos) {
  int64_t data = kShardHeaderBytes + static_cast<int64_t>(table.size());
  const int64_t size = static_cast<int64_t>(table.size());
  while (pos < size) {
    if (size - pos < 4) return Corrupt(path_, "table entry cut short");
    const int64_t name_len = static_cast<int64_t>(GetLittleEndian(table.data() + pos, 4));
    pos += 4;
    if (name_len == 0 || name_len > kMaxArrayNameBytes || size - pos < name_len + 9) {
      return Corrupt(path_, "table entry cut short");
    }
    ArrayInfo a;
    a.name = table.substr(pos, name_len);
    pos += name_len;
    const uint8_t dtype = static_cast<uint8_t>(table[pos++]);
    if (dtype != 1 && dtype != 2)
      return Corrupt(path_, absl::StrCat("array ", a.name, ": dtype ", dtype));
    a.dtype = static_cast<ArrayDType>(dtype);
    const uint64_t numel = GetLittleEndian(table.data() + pos, 8);
    pos += 8;
    if (numel > static_cast<uint64_t>(file_size_)) {
      return Corrupt(path_,
                     absl::StrCat("array ", a.name, ": ", numel, " elements exceed the file"));
    }
    a.numel = static_cast<int64_t>(numel);
    const int64_t bytes = a.numel * ArrayDTypeSize(a.dtype);
    const int64_t chunks = ShardChunks(bytes, chunk_bytes_);
    if ((size - pos) / 4 < chunks)
      return Corrupt(path_, absl::StrCat("array ", a.name, ": chunk checksums cut short"));
    for (int64_t c = 0; c < chunks; ++c, pos += 4) {
      a.chunk_crcs.push_back(static_cast<uint32_t>(GetLittleEndian(table.data() + pos, 4)));
    }
    a.data_offset = data;
    data += bytes;
    if (!index_.emplace(a.name, static_cast<int>(arrays_.size())).second) {
      return Corrupt(path_, absl::StrCat("array ", a.name, " listed twice"));
    }
    arrays_.push_back(std::move(a));
  }
  if (data != file_size_) {
    return Corrupt(path_, absl::StrCat("the table describes ", data, " bytes but the file has ",
                                       file_size_, data > file_size_ ? " (truncated)" : ""));
  }
  return absl::OkStatus();
}

ShardFileReader::ShardFileReader(ShardFileReader&& o) noexcept
    : path_(std::move(o.path_)),
      fd_(o.fd_),
      file_size_(o.file_size_),
      chunk_bytes_(o.chunk_bytes_),
      identity_(std::move(o.identity_)),
      arrays_(std::move(o.arrays_)),
      index_(std::move(o.index_)),
      chunk_(std::move(o.chunk_)),
      chunk_file_offset_(o.chunk_file_offset_) {
  o.fd_ = -1;
}

ShardFileReader::~ShardFileReader() {
  if (fd_ >= 0) ::close(fd_);
}

const ArrayInfo* ShardFileReader::Find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &arrays_[it->second];
}

absl::Status ShardFileReader::ReadRange(const std::string& name, int64_t offset, int64_t numel,
                                        void* out) const {
  const ArrayInfo* a = Find(name);
  if (a == nullptr) return Corrupt(path_, absl::StrCat("no array named '", name, "'"));
  if (offset < 0 || numel < 0 || offset + numel > a->numel) {
    return absl::OutOfRangeError(absl::StrCat("checkpoint shard file ", path_, ": array ", name,
                                              " has ", a->numel, " elements, asked for [", offset,
                                              ", ", offset + numel, ")"));
  }
  if (numel == 0) return absl::OkStatus();
  const int64_t esize = ArrayDTypeSize(a->dtype);
  const int64_t begin = offset * esize, end = (offset + numel) * esize;
  const int64_t total = a->numel * esize;
  char* dst = static_cast<char*>(out);
  for (int64_t c = begin / chunk_bytes_; c * chunk_bytes_ < end; ++c) {
    const int64_t cbegin = c * chunk_bytes_;
    const int64_t n = std::min<int64_t>(chunk_bytes_, total - cbegin);
    if (cbegin >= begin && cbegin + n <= end) {
      // A whole chunk inside the range: read and verify it in place, without the bounce buffer.
      char* whole = dst + (cbegin - begin);
      absl::Status s = PreadFully(fd_, whole, n, a->data_offset + cbegin, path_);
      if (!s.ok()) return s;
      if (Crc32c(whole, static_cast<size_t>(n)) != a->chunk_crcs[c]) {
        return Corrupt(path_, absl::StrCat("checksum mismatch in array ", name, " bytes [", cbegin,
                                           ", ", cbegin + n, ")"));
      }
      continue;
    }
    if (chunk_file_offset_ != a->data_offset + cbegin) {
      chunk_file_offset_ = -1;
      chunk_.resize(chunk_bytes_);
      absl::Status s = PreadFully(fd_, chunk_.data(), n, a->data_offset + cbegin, path_);
      if (!s.ok()) return s;
      if (Crc32c(chunk_.data(), static_cast<size_t>(n)) != a->chunk_crcs[c]) {
        return Corrupt(path_, absl::StrCat("checksum mismatch in array ", name, " bytes [", cbegin,
                                           ", ", cbegin + n, ")"));
      }
      chunk_file_offset_ = a->data_offset + cbegin;
    }
    const int64_t from = std::max(begin, cbegin), to = std::min(end, cbegin + n);
    std::memcpy(dst + (from - begin), chunk_.data() + (from - cbegin),
                static_cast<size_t>(to - from));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<uint8_t>> ShardFileReader::ReadAllBytes(const std::string& name) const {
  const ArrayInfo* a = Find(name);
  if (a == nullptr) return Corrupt(path_, absl::StrCat("no array named '", name, "'"));
  std::vector<uint8_t> out(a->numel * ArrayDTypeSize(a->dtype));
  absl::Status s = ReadRange(name, 0, a->numel, out.data());
  if (!s.ok()) return s;
  return out;
}

}  // namespace zerotrain::checkpoint

// The shard file writers (format in shard_file.h): the streaming one, and the whole-array one
// built on it.
#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "checkpoint/crc32c.h"
#include "checkpoint/little_endian.h"
#include "checkpoint/shard_file.h"
#include "tools/status_macros.h"

namespace zerotrain::checkpoint {

namespace {

// Why specs[i] cannot follow specs[0, i) in one file; "" when it can.
std::string ArrayProblem(const std::vector<ArraySpec>& specs, size_t i) {
  const ArraySpec& a = specs[i];
  if (a.name.empty() || static_cast<int64_t>(a.name.size()) > kMaxArrayNameBytes || a.numel < 0) {
    return absl::StrCat("bad array '", a.name, "' of ", a.numel, " elements");
  }
  for (size_t j = 0; j < i; ++j) {
    if (specs[j].name == a.name) return absl::StrCat("duplicate '", a.name, "'");
  }
  return "";
}

}  // namespace

int ArrayDTypeSize(ArrayDType dtype) { return dtype == ArrayDType::kFloat32 ? 4 : 1; }

absl::StatusOr<ShardStreamWriter> ShardStreamWriter::Open(const std::string& path,
                                                          std::vector<ArraySpec> arrays,
                                                          std::optional<ShardIdentity> identity,
                                                          uint32_t chunk_bytes) {
  const std::string where = absl::StrCat("shard file ", path, ": ");
  if (chunk_bytes == 0) return absl::InvalidArgumentError(absl::StrCat(where, "chunk size 0"));
  std::vector<Progress> progress;
  for (size_t i = 0; i < arrays.size(); ++i) {
    const std::string problem = ArrayProblem(arrays, i);
    if (!problem.empty()) return absl::InvalidArgumentError(absl::StrCat(where, problem));
  }
  for (ArraySpec& a : arrays) {
    Progress p;
    p.bytes = a.numel * ArrayDTypeSize(a.dtype);
    p.spec = std::move(a);
    progress.push_back(std::move(p));
  }
  ZT_ASSIGN_OR_RETURN(AtomicFileWriter file, AtomicFileWriter::Open(path));
  ShardStreamWriter w(std::move(file), std::move(progress), std::move(identity), chunk_bytes);
  int64_t offset = static_cast<int64_t>(w.HeaderAndTable().size());
  for (Progress& p : w.arrays_) {
    p.file_offset = offset;
    offset += p.bytes;
  }
  return w;
}

absl::Status ShardStreamWriter::Append(int index, const void* data, int64_t numel) {
  if (index < 0 || index >= static_cast<int>(arrays_.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("shard file ", file_.path(), ": no array #", index));
  }
  Progress& a = arrays_[index];
  const int64_t n = numel * ArrayDTypeSize(a.spec.dtype);
  if (numel < 0 || n > a.bytes - a.written) {
    return absl::InvalidArgumentError(absl::StrCat("shard file ", file_.path(), ": array '",
                                                   a.spec.name, "' holds ", a.bytes, " bytes, ",
                                                   a.written, " written, ", n, " more given"));
  }
  ZT_RETURN_IF_ERROR(file_.WriteAt(a.file_offset + a.written, data, n));
  const char* p = static_cast<const char*>(data);
  for (int64_t done = 0; done < n;) {
    const int64_t room = chunk_bytes_ - a.written % chunk_bytes_;
    const int64_t take = std::min(room, n - done);
    a.open_chunk_crc = Crc32cExtend(a.open_chunk_crc, p + done, static_cast<size_t>(take));
    done += take;
    a.written += take;
    if (take == room) {
      a.chunk_crcs.push_back(a.open_chunk_crc);
      a.open_chunk_crc = 0;
    }
  }
  return absl::OkStatus();
}

std::string ShardStreamWriter::HeaderAndTable() const {
  std::string table;
  if (identity_) EncodeIdentity(*identity_, &table);
  for (const Progress& a : arrays_) {
    PutLittleEndian(&table, a.spec.name.size(), 4);
    table += a.spec.name;
    table.push_back(static_cast<char>(a.spec.dtype));
    PutLittleEndian(&table, static_cast<uint64_t>(a.spec.numel), 8);
    // Before Commit the checksums are not known yet; their space is.
    for (int64_t c = 0; c < ShardChunks(a.bytes, chunk_bytes_); ++c) {
      PutLittleEndian(&table, c < static_cast<int64_t>(a.chunk_crcs.size()) ? a.chunk_crcs[c] : 0,
                      4);
    }
  }
  std::string out(kShardMagic, sizeof(kShardMagic));
  PutLittleEndian(&out, identity_ ? kShardFormatVersion : 1, 4);
  PutLittleEndian(&out, chunk_bytes_, 4);
  PutLittleEndian(&out, table.size(), 8);
  PutLittleEndian(&out, Crc32cExtend(Crc32c(out.data(), out.size()), table.data(), table.size()),
                  4);
  return out + table;
}

absl::StatusOr<WrittenFile> ShardStreamWriter::Commit() {
  for (const Progress& a : arrays_) {
    if (a.written != a.bytes) {
      return absl::FailedPreconditionError(absl::StrCat("shard file ", file_.path(), ": array '",
                                                        a.spec.name, "' has ", a.written,
                                                        " of its ", a.bytes, " bytes"));
    }
  }
  for (Progress& a : arrays_) {
    if (a.bytes % chunk_bytes_ != 0) a.chunk_crcs.push_back(a.open_chunk_crc);  // the short last
    a.open_chunk_crc = 0;
  }
  const std::string head = HeaderAndTable();
  ZT_RETURN_IF_ERROR(file_.WriteAt(0, head.data(), static_cast<int64_t>(head.size())));
  // Every chunk but each array's last is chunk_bytes_ long: one shift serves them all.
  const Crc32cShift full_chunk(chunk_bytes_);
  uint32_t crc = Crc32c(head.data(), head.size());
  for (const Progress& a : arrays_) {
    for (size_t c = 0; c < a.chunk_crcs.size(); ++c) {
      const int64_t n = std::min<int64_t>(chunk_bytes_, a.bytes - c * int64_t{chunk_bytes_});
      crc = n == chunk_bytes_ ? full_chunk.Concat(crc, a.chunk_crcs[c])
                              : Crc32cConcat(crc, a.chunk_crcs[c], static_cast<uint64_t>(n));
    }
  }
  WrittenFile out{file_.path(), file_.size(), crc};
  ZT_RETURN_IF_ERROR(file_.Commit());
  return out;
}

absl::Status ShardFileWriter::Add(const std::string& name, ArrayDType dtype, const void* data,
                                  int64_t numel) {
  specs_.push_back({name, dtype, numel});
  std::string problem = ArrayProblem(specs_, specs_.size() - 1);
  if (problem.empty() && numel > 0 && data == nullptr) problem = "no data for array '" + name + "'";
  if (!problem.empty()) {
    specs_.pop_back();
    return absl::InvalidArgumentError(absl::StrCat("ShardFileWriter: ", problem));
  }
  data_.push_back(data);
  return absl::OkStatus();
}

absl::StatusOr<WrittenFile> ShardFileWriter::Write(const std::string& path) const {
  ZT_ASSIGN_OR_RETURN(ShardStreamWriter w,
                      ShardStreamWriter::Open(path, specs_, identity_, chunk_bytes_));
  for (size_t i = 0; i < specs_.size(); ++i) {
    ZT_RETURN_IF_ERROR(w.Append(static_cast<int>(i), data_[i], specs_[i].numel));
  }
  return w.Commit();
}

}  // namespace zerotrain::checkpoint

// SwapSpace: named regions, one preallocated SwapFile each, swapped whole through AsyncFileIO;
// the tail page of a region whose size is not a multiple of 4 KiB goes through a bounce page.
#include "offload/swap_space.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tools/status_macros.h"

namespace zerotrain::offload {

struct SwapSpace::Region {
  std::string name;
  int64_t bytes = 0;
  std::unique_ptr<SwapFile> file;
  // One aligned page for the last bytes % kIoAlignment bytes; null when there are none.
  void* bounce = nullptr;
  IoHandle last;  // the latest swap of this region

  ~Region() { std::free(bounce); }
};

namespace {

absl::Status CheckName(const std::string& name) {
  bool ok = !name.empty() && name[0] != '.';
  for (char c : name) {
    ok = ok && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                c == '_' || c == '.' || c == '-');
  }
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "SwapSpace: region name '", name, "' must be made of [A-Za-z0-9_.-] and not start with '.'"));
}

}  // namespace

SwapSpace::SwapSpace(std::string directory, std::unique_ptr<AsyncFileIO> io, bool use_o_direct)
    : directory_(std::move(directory)), use_o_direct_(use_o_direct), io_(std::move(io)) {}

absl::StatusOr<std::unique_ptr<SwapSpace>> SwapSpace::Create(const SwapSpaceOptions& options) {
  if (options.directory.empty()) {
    return absl::InvalidArgumentError("SwapSpace: the swap directory (nvme_path) is empty");
  }
  ZT_ASSIGN_OR_RETURN(std::unique_ptr<AsyncFileIO> io, AsyncFileIO::Create(options.aio));
  std::string pattern = options.directory;
  if (pattern.back() != '/') pattern += '/';
  pattern += "zerotrain-swap-XXXXXX";
  std::vector<char> buf(pattern.begin(), pattern.end());
  buf.push_back('\0');
  if (mkdtemp(buf.data()) == nullptr) {
    return absl::ErrnoToStatus(
        errno, absl::StrCat("SwapSpace: cannot create a swap directory in ", options.directory));
  }
  return std::unique_ptr<SwapSpace>(
      new SwapSpace(std::string(buf.data()), std::move(io), options.use_o_direct));
}

SwapSpace::~SwapSpace() {
  io_.reset();
  {
    std::lock_guard<std::mutex> lock(mu_);
    regions_.clear();
  }
  // Best effort: a destructor has no one to report to, and a leftover empty directory is
  // harmless. Anything else found in it was put there by someone else, so it stays.
  rmdir(directory_.c_str());
}

absl::Status SwapSpace::Reserve(const std::string& name, int64_t bytes) {
  ZT_RETURN_IF_ERROR(CheckName(name));
  if (bytes <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("SwapSpace: Reserve('", name, "'): bytes must be positive, got ", bytes));
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (regions_.count(name) != 0) {
    return absl::AlreadyExistsError(
        absl::StrCat("SwapSpace: Reserve('", name, "'): the region is already reserved"));
  }
  auto r = std::make_unique<Region>();
  r->name = name;
  r->bytes = bytes;
  const int64_t file_bytes = (bytes + kIoAlignment - 1) / kIoAlignment * kIoAlignment;
  ZT_ASSIGN_OR_RETURN(r->file, SwapFile::Create(absl::StrCat(directory_, "/", name, ".swp"),
                                                file_bytes, use_o_direct_));
  if (bytes % kIoAlignment != 0) {
    r->bounce = std::aligned_alloc(kIoAlignment, kIoAlignment);
    if (r->bounce == nullptr) {
      return absl::ResourceExhaustedError(
          absl::StrCat("SwapSpace: Reserve('", name, "'): no memory for a bounce page"));
    }
    std::memset(r->bounce, 0, kIoAlignment);
  }
  regions_[name] = std::move(r);
  return absl::OkStatus();
}

absl::StatusOr<IoHandle> SwapSpace::SwapOut(const std::string& name, const void* host) {
  // The buffer is only read from on this path.
  return Swap(name, IoOp::kWrite, const_cast<void*>(host));
}

absl::StatusOr<IoHandle> SwapSpace::SwapIn(const std::string& name, void* host) {
  return Swap(name, IoOp::kRead, host);
}

absl::StatusOr<IoHandle> SwapSpace::Swap(const std::string& name, IoOp op, void* host) {
  const char* what = op == IoOp::kWrite ? "SwapOut" : "SwapIn";
  std::lock_guard<std::mutex> lock(mu_);
  auto it = regions_.find(name);
  if (it == regions_.end()) {
    return absl::NotFoundError(
        absl::StrCat("SwapSpace: ", what, "('", name, "'): no such region (Reserve it first)"));
  }
  Region& r = *it->second;
  if (host == nullptr || reinterpret_cast<uintptr_t>(host) % kIoAlignment != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("SwapSpace: ", what, "('", name, "'): host buffer ",
                     absl::Hex(reinterpret_cast<uintptr_t>(host)), " is not ", kIoAlignment,
                     "-byte aligned (allocate it from a PinnedHostPool)"));
  }
  // Two swaps of one region at once would race on its bytes and on its bounce page.
  if (!r.last.done()) {
    return absl::FailedPreconditionError(
        absl::StrCat("SwapSpace: ", what, "('", name,
                     "'): the region's previous swap has not finished; wait "
                     "on its handle first"));
  }
  char* bytes = static_cast<char*>(host);
  const int64_t body = r.bytes / kIoAlignment * kIoAlignment;
  const int64_t tail = r.bytes - body;
  std::vector<IoBlock> blocks;
  if (body > 0) blocks = io_->SplitIntoBlocks(*r.file, op, 0, bytes, body);
  std::function<absl::Status()> on_success;
  if (tail > 0) {
    if (op == IoOp::kWrite) std::memcpy(r.bounce, bytes + body, tail);
    blocks.push_back({r.file.get(), op, body, r.bounce, kIoAlignment});
    if (op == IoOp::kRead) {
      on_success = [bounce = r.bounce, dst = bytes + body, tail] {
        std::memcpy(dst, bounce, tail);
        return absl::OkStatus();
      };
    }
  }
  ZT_ASSIGN_OR_RETURN(r.last, io_->Submit(absl::StrCat(op == IoOp::kWrite ? "swap-out" : "swap-in",
                                                       " of '", name, "' (", r.bytes, " bytes)"),
                                          std::move(blocks), std::move(on_success)));
  (op == IoOp::kWrite ? traffic_.bytes_written : traffic_.bytes_read) += r.bytes;
  return r.last;
}

SwapTraffic SwapSpace::traffic() const {
  std::lock_guard<std::mutex> lock(mu_);
  return traffic_;
}

absl::StatusOr<int64_t> SwapSpace::region_bytes(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = regions_.find(name);
  if (it == regions_.end()) {
    return absl::NotFoundError(absl::StrCat("SwapSpace: no region '", name, "'"));
  }
  return it->second->bytes;
}

absl::StatusOr<std::string> SwapSpace::file_path(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = regions_.find(name);
  if (it == regions_.end()) {
    return absl::NotFoundError(absl::StrCat("SwapSpace: no region '", name, "'"));
  }
  return it->second->file->path();
}

IoMode SwapSpace::mode() const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [name, r] : regions_) {
    if (r->file->mode() == IoMode::kBuffered) return IoMode::kBuffered;
  }
  return use_o_direct_ ? IoMode::kDirect : IoMode::kBuffered;
}

int64_t SwapSpace::reserved_file_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  int64_t total = 0;
  for (const auto& [name, r] : regions_) total += r->file->size();
  return total;
}

}  // namespace zerotrain::offload

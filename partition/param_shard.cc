// ParamShard: stage 3's parameter shard with the model, in a pool block, or swapped to NVMe one
// region per part with a prefix of the parts kept in host memory (max_in_cpu).
#include "partition/param_shard.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tools/status_macros.h"

namespace zerotrain::partition {

using offload::HostBlock;
using offload::IoHandle;

const char* ParamDeviceName(ParamDevice d) {
  switch (d) {
    case ParamDevice::kModel:
      return "none";
    case ParamDevice::kHost:
      return "cpu";
    case ParamDevice::kNvme:
      return "nvme";
  }
  return "unknown";
}

namespace {

template <typename T>
absl::Status Bad(const char* field, const T& value, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat("ParamShard: ", field, " = ", value, ": ", why));
}

absl::Status CheckValues(const at::Tensor& v) {
  if (!v.defined()) return Bad("values", "undefined", "need the shard's tensor");
  if (v.dim() != 1) return Bad("values.dim()", v.dim(), "must be 1-D");
  if (!v.is_contiguous()) return Bad("values.is_contiguous()", "false", "must be contiguous");
  return absl::OkStatus();
}

// `numel_name` is how the caller gave the length (values.numel(), or the source's numel).
absl::Status CheckArgs(int64_t numel, const char* numel_name, const std::vector<int64_t>& starts,
                       const ParamShardOptions& o) {
  if (numel <= 0) return Bad(numel_name, numel, "must be > 0");
  const std::string s = absl::StrCat("{", absl::StrJoin(starts, ", "), "}");
  if (starts.empty()) return Bad("part_starts", s, "need at least one part");
  if (starts[0] != 0) return Bad("part_starts", s, "must start at 0");
  for (size_t i = 1; i < starts.size(); ++i) {
    if (starts[i] <= starts[i - 1]) return Bad("part_starts", s, "must be strictly increasing");
  }
  if (starts.back() >= numel) {
    return Bad("part_starts", s, absl::StrCat("each must be < ", numel_name, " = ", numel));
  }
  const std::string device = ParamDeviceName(o.device);
  if (o.device != ParamDevice::kModel && o.pool == nullptr) {
    return Bad("pool", "null", "required for device " + device);
  }
  if (o.device == ParamDevice::kNvme && o.swap == nullptr) {
    return Bad("swap", "null", "required for device " + device);
  }
  if (o.max_in_cpu < 0) return Bad("max_in_cpu", o.max_in_cpu, "must be >= 0");
  if (o.io_timeout <= absl::ZeroDuration()) {
    return Bad("io_timeout", absl::FormatDuration(o.io_timeout), "must be > 0");
  }
  return absl::OkStatus();
}

// A tensor over a pool block that returns the block to the pool when its storage dies, so Read can
// hand out swapped-in data without copying it again.
at::Tensor Own(HostBlock block, int64_t numel, at::ScalarType dtype) {
  auto owner = std::make_shared<HostBlock>(std::move(block));
  void* data = owner->data();
  return at::from_blob(
      data, {numel}, [owner](void*) mutable { owner.reset(); }, at::TensorOptions().dtype(dtype));
}

at::Tensor Borrow(const HostBlock& block, int64_t numel, at::ScalarType dtype) {
  return at::from_blob(block.data(), {numel}, at::TensorOptions().dtype(dtype));
}

// Writing a view Read returned back to itself is the common case for resident shards: no copy.
void CopyInto(at::Tensor dst, const at::Tensor& src) {
  if (dst.data_ptr() == src.data_ptr() && dst.numel() == src.numel() &&
      (src.numel() <= 1 || src.stride(0) == 1)) {
    return;
  }
  dst.copy_(src);
}

}  // namespace

struct ParamShard::Impl {
  struct Part {
    int64_t begin = 0, numel = 0;
    bool kept = false;   // kNvme: in `resident`; swapped otherwise
    std::string region;  // kNvme, swapped parts
  };
  // One part's transfer and the block it reads into or writes from. The block never goes back to
  // the pool while the transfer may still use it, however the caller leaves (an error, a
  // c10::Error): it is waited for, or leaked once it outlived io_timeout.
  struct Swap {
    Swap(int part, absl::Duration timeout) : part(part), timeout(timeout) {}
    Swap(Swap&&) = default;
    ~Swap() {
      if (!abandoned && !handle.done()) handle.Wait(timeout).IgnoreError();
      if (!handle.done()) static_cast<void>(new HostBlock(std::move(block)));
    }
    int part;
    absl::Duration timeout;
    HostBlock block;
    IoHandle handle;
    bool out = false;  // swap-out, else swap-in
    absl::Status status;
    bool abandoned = false;  // waited for io_timeout already
  };

  ParamShardOptions o;
  at::ScalarType dtype = at::kFloat;
  int64_t numel = 0, elem = 0;
  std::vector<int64_t> starts;
  std::vector<Part> parts;
  at::Tensor resident;  // kModel/kHost: the shard; kNvme: the kept parts, [0, kept_numel)
  int64_t kept_numel = 0, host_bytes = 0, nvme_bytes = 0;

  int64_t PartBytes(int p) const { return parts[p].numel * elem; }
  // [lo, hi): the elements of [begin, begin + n) in part p.
  std::pair<int64_t, int64_t> Overlap(int p, int64_t begin, int64_t n) const {
    return {std::max(begin, parts[p].begin), std::min(begin + n, parts[p].begin + parts[p].numel)};
  }
  int PartOf(int64_t i) const {
    return static_cast<int>(std::upper_bound(starts.begin(), starts.end(), i) - starts.begin()) - 1;
  }
  absl::Status Context(const absl::Status& s, const Swap& swap, int p) const {
    return Context(s, swap.out ? "swap-out" : "swap-in", p);
  }
  absl::Status Context(const absl::Status& s, const char* what, int p) const {
    return absl::Status(s.code(), absl::StrCat("ParamShard: ", what, " of part ", p, " (region '",
                                               parts[p].region, "'): ", s.message()));
  }
  absl::StatusOr<HostBlock> Allocate(int64_t bytes, const std::string& what) const {
    absl::StatusOr<HostBlock> b = o.pool->Allocate(bytes);
    if (!b.ok()) {
      return absl::Status(b.status().code(),
                          absl::StrCat("ParamShard: ", what, ": ", b.status().message()));
    }
    return b;
  }
  // Returns false, with s.status set, when the swap could not even be queued.
  bool Start(Swap& s, bool out) const {
    s.out = out;
    const std::string& region = parts[s.part].region;
    absl::StatusOr<IoHandle> h =
        out ? o.swap->SwapOut(region, s.block.data()) : o.swap->SwapIn(region, s.block.data());
    if (!h.ok()) s.status = Context(h.status(), s, s.part);
    if (h.ok()) s.handle = *h;
    return h.ok();
  }
  absl::Status Wait(Swap& s) const {
    if (!s.status.ok()) return s.status;
    absl::Status w = s.handle.Wait(o.io_timeout);
    if (!w.ok()) s.status = Context(w, s, s.part);
    s.abandoned = !s.handle.done();
    return s.status;
  }
  absl::Status SetUpNvme(const Source& source);
  absl::StatusOr<at::Tensor> ReadNvme(int64_t begin, int64_t n) const;
  absl::Status WriteNvme(int64_t begin, const at::Tensor& values);
};

// Regions are reserved before anything is written, so a full disk fails before any I/O; the swapped
// parts go out one at a time through one staging block to bound Create's extra memory.
absl::Status ParamShard::Impl::SetUpNvme(const Source& source) {
  int64_t largest = 0;
  for (int p = 0; p < static_cast<int>(parts.size()); ++p) {
    Part& part = parts[p];
    // The first part that does not fit ends the kept ones, so they are one block [0, kept_numel).
    part.kept = part.begin + part.numel <= o.max_in_cpu && part.begin == kept_numel;
    if (part.kept) {
      kept_numel += part.numel;
      continue;
    }
    part.region = absl::StrCat(o.region_prefix, "p", p);
    absl::Status s = o.swap->Reserve(part.region, PartBytes(p));
    if (!s.ok()) return Context(s, "reservation", p);
    nvme_bytes += PartBytes(p);
    largest = std::max(largest, PartBytes(p));
  }
  if (kept_numel > 0) {
    ZT_ASSIGN_OR_RETURN(HostBlock block, Allocate(kept_numel * elem, "kept parts"));
    host_bytes = block.capacity();
    resident = Own(std::move(block), kept_numel, dtype);
  }
  Swap s(0, o.io_timeout);
  if (largest > 0) {
    ZT_ASSIGN_OR_RETURN(s.block, Allocate(largest, "staging block"));
  }
  for (int p = 0; p < static_cast<int>(parts.size()); ++p) {
    if (parts[p].kept) {
      ZT_RETURN_IF_ERROR(source.fill(p, resident.narrow(0, parts[p].begin, parts[p].numel)));
      continue;
    }
    s.part = p;
    ZT_RETURN_IF_ERROR(source.fill(p, Borrow(s.block, parts[p].numel, dtype)));
    if (!Start(s, /*out=*/true)) return s.status;
    ZT_RETURN_IF_ERROR(Wait(s));
  }
  return absl::OkStatus();
}

// Every swap-in is queued before the first wait so that parts load in parallel; nothing returns
// while a transfer that was started still uses its block.
absl::StatusOr<at::Tensor> ParamShard::Impl::ReadNvme(int64_t begin, int64_t n) const {
  const int first = PartOf(begin), last = PartOf(begin + n - 1);
  if (first == last && !parts[first].kept && begin == parts[first].begin &&
      n == parts[first].numel) {
    Swap s(first, o.io_timeout);
    ZT_ASSIGN_OR_RETURN(s.block, Allocate(PartBytes(first), "swap-in buffer"));
    if (!Start(s, /*out=*/false)) return s.status;
    ZT_RETURN_IF_ERROR(Wait(s));
    return Own(std::move(s.block), n, dtype);
  }
  ZT_ASSIGN_OR_RETURN(HostBlock result,
                      Allocate(n * elem, absl::StrCat("Read of ", n, " elements")));
  at::Tensor out = Own(std::move(result), n, dtype);
  std::vector<Swap> swaps;
  absl::Status status;
  for (int p = first; p <= last && status.ok(); ++p) {
    const auto [lo, hi] = Overlap(p, begin, n);
    if (parts[p].kept) {
      out.narrow(0, lo - begin, hi - lo).copy_(resident.narrow(0, lo, hi - lo));
      continue;
    }
    Swap s(p, o.io_timeout);
    absl::StatusOr<HostBlock> b = Allocate(PartBytes(p), "swap-in buffer");
    status = b.status();
    if (!b.ok()) break;
    s.block = *std::move(b);
    if (!Start(s, /*out=*/false)) status = s.status;
    swaps.push_back(std::move(s));
  }
  for (Swap& s : swaps) {
    absl::Status w = Wait(s);
    status.Update(w);
    if (!w.ok() || !status.ok()) continue;
    const auto [lo, hi] = Overlap(s.part, begin, n);
    out.narrow(0, lo - begin, hi - lo)
        .copy_(Borrow(s.block, parts[s.part].numel, dtype)
                   .narrow(0, lo - parts[s.part].begin, hi - lo));
  }
  if (!status.ok()) return status;
  return out;
}

// Fully covered parts go straight out; partly covered ones are read, patched and written, their
// reads overlapping the other parts' writes. Every started transfer is waited for, and a part whose
// read failed is not written, so a success means every part reached its region.
absl::Status ParamShard::Impl::WriteNvme(int64_t begin, const at::Tensor& values) {
  const int64_t n = values.numel();
  const int first = PartOf(begin), last = PartOf(begin + n - 1);
  auto patch = [&](const Swap& s) {
    const auto [lo, hi] = Overlap(s.part, begin, n);
    Borrow(s.block, parts[s.part].numel, dtype)
        .narrow(0, lo - parts[s.part].begin, hi - lo)
        .copy_(values.narrow(0, lo - begin, hi - lo));
  };
  std::vector<Swap> swaps;
  absl::Status status;
  for (int p = first; p <= last && status.ok(); ++p) {
    const auto [lo, hi] = Overlap(p, begin, n);
    if (parts[p].kept) {
      CopyInto(resident.narrow(0, lo, hi - lo), values.narrow(0, lo - begin, hi - lo));
      continue;
    }
    absl::StatusOr<HostBlock> b = Allocate(PartBytes(p), "swap buffer");
    status = b.status();
    if (!b.ok()) break;
    swaps.emplace_back(p, o.io_timeout);
    swaps.back().block = *std::move(b);
    const bool whole = hi - lo == parts[p].numel;
    if (whole) patch(swaps.back());
    if (!Start(swaps.back(), /*out=*/whole)) status = swaps.back().status;
  }
  for (Swap& s : swaps) {
    if (s.out) continue;
    if (!Wait(s).ok() || !status.ok()) continue;
    patch(s);
    if (!Start(s, /*out=*/true)) status = s.status;
  }
  for (Swap& s : swaps) status.Update(Wait(s));
  return status;
}

ParamShard::ParamShard(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ParamShard::~ParamShard() = default;

absl::StatusOr<std::unique_ptr<ParamShard>> ParamShard::Create(Source source,
                                                               std::vector<int64_t> part_starts,
                                                               const ParamShardOptions& options) {
  return Build(std::move(source), std::move(part_starts), options, at::Tensor());
}

absl::StatusOr<std::unique_ptr<ParamShard>> ParamShard::Create(at::Tensor values,
                                                               std::vector<int64_t> part_starts,
                                                               const ParamShardOptions& options) {
  ZT_RETURN_IF_ERROR(CheckValues(values));
  Source source{values.numel(), values.options(), nullptr};
  source.fill = [&values, starts = part_starts](int p, at::Tensor dst) {
    CopyInto(dst, values.narrow(0, starts[p], dst.numel()));  // kModel: dst is `values` already
    return absl::OkStatus();
  };
  return Build(std::move(source), std::move(part_starts), options, values);
}

absl::StatusOr<std::unique_ptr<ParamShard>> ParamShard::Build(Source source,
                                                              std::vector<int64_t> part_starts,
                                                              const ParamShardOptions& options,
                                                              at::Tensor whole) {
  const char* numel_name = whole.defined() ? "values.numel()" : "numel";
  ZT_RETURN_IF_ERROR(CheckArgs(source.numel, numel_name, part_starts, options));
  auto m = std::make_unique<Impl>();
  m->o = options;
  m->dtype = c10::typeMetaToScalarType(source.options.dtype());
  m->numel = source.numel;
  m->elem = static_cast<int64_t>(c10::elementSize(m->dtype));
  m->starts = std::move(part_starts);
  for (size_t p = 0; p < m->starts.size(); ++p) {
    const int64_t end = p + 1 < m->starts.size() ? m->starts[p + 1] : m->numel;
    m->parts.push_back({m->starts[p], end - m->starts[p], false, ""});
  }
  try {
    if (options.device == ParamDevice::kNvme) {
      ZT_RETURN_IF_ERROR(m->SetUpNvme(source));
    } else {
      if (options.device == ParamDevice::kModel) {
        m->resident = whole.defined() ? whole : at::empty({m->numel}, source.options);
      } else {
        ZT_ASSIGN_OR_RETURN(HostBlock block, m->Allocate(m->numel * m->elem, "the shard"));
        m->host_bytes = block.capacity();
        m->resident = Own(std::move(block), m->numel, m->dtype);
      }
      for (int p = 0; p < static_cast<int>(m->parts.size()); ++p) {
        const Impl::Part& part = m->parts[p];
        ZT_RETURN_IF_ERROR(source.fill(p, m->resident.narrow(0, part.begin, part.numel)));
      }
    }
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("ParamShard: Create (", ParamDeviceName(options.device),
                                            ", numel ", m->numel,
                                            "): ", e.what_without_backtrace()));
  }
  return std::unique_ptr<ParamShard>(new ParamShard(std::move(m)));
}

absl::StatusOr<at::Tensor> ParamShard::Read(int64_t begin, int64_t numel) const {
  const Impl& m = *impl_;
  if (begin < 0 || numel < 0 || begin > m.numel - numel) {
    return absl::InvalidArgumentError(absl::StrCat("ParamShard: Read(", begin, ", ", numel,
                                                   "): the range must lie in [0, ", m.numel, "]"));
  }
  try {
    if (m.o.device != ParamDevice::kNvme || (m.kept_numel > 0 && begin + numel <= m.kept_numel)) {
      return m.resident.narrow(0, begin, numel);
    }
    if (numel == 0) return at::empty({0}, at::TensorOptions().dtype(m.dtype));
    return m.ReadNvme(begin, numel);
  } catch (const c10::Error& e) {
    return absl::InternalError(
        absl::StrCat("ParamShard: Read(", begin, ", ", numel, "): ", e.what_without_backtrace()));
  }
}

absl::Status ParamShard::Write(int64_t begin, const at::Tensor& values) {
  Impl& m = *impl_;
  if (!values.defined() || values.dim() != 1 || values.scalar_type() != m.dtype) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ParamShard: Write(", begin, "): values must be a 1-D ", c10::toString(m.dtype),
        " tensor, got ",
        values.defined() ? absl::StrCat(values.dim(), "-D ", c10::toString(values.scalar_type()))
                         : "an undefined tensor"));
  }
  const int64_t n = values.numel();
  if (begin < 0 || begin > m.numel - n) {
    return absl::InvalidArgumentError(absl::StrCat("ParamShard: Write(", begin, ") of ", n,
                                                   " elements: the range must lie in [0, ", m.numel,
                                                   "]"));
  }
  if (n == 0) return absl::OkStatus();
  try {
    if (m.o.device != ParamDevice::kNvme || begin + n <= m.kept_numel) {
      CopyInto(m.resident.narrow(0, begin, n), values);
      return absl::OkStatus();
    }
    return m.WriteNvme(begin, values);
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("ParamShard: Write(", begin, ") of ", n,
                                            " elements: ", e.what_without_backtrace()));
  }
}

int64_t ParamShard::numel() const { return impl_->numel; }
at::ScalarType ParamShard::dtype() const { return impl_->dtype; }
const ParamShardOptions& ParamShard::options() const { return impl_->o; }
int64_t ParamShard::host_bytes() const { return impl_->host_bytes; }
int64_t ParamShard::nvme_bytes() const { return impl_->nvme_bytes; }
int ParamShard::num_parts() const { return static_cast<int>(impl_->parts.size()); }
int64_t ParamShard::part_begin(int p) const { return impl_->parts[p].begin; }
int64_t ParamShard::part_numel(int p) const { return impl_->parts[p].numel; }

}  // namespace zerotrain::partition

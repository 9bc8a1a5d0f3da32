// SubGroupStore: the optimizer's per-element fp32 state, resident in host memory or swapped to
// NVMe one sub-group region at a time through a few buffers that read ahead and write behind.
#include "offload/sub_group_store.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <exception>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tools/status_macros.h"

namespace zerotrain::offload {

const char* StoreDeviceName(StoreDevice d) { return d == StoreDevice::kHost ? "host" : "nvme"; }

namespace {

// The lower layers' messages already name the file and the operation; this adds which sub-group
// or buffer of the store it was, and keeps the code (ResourceExhausted, DataLoss, ...).
absl::Status WithContext(const absl::Status& s, const std::string& context) {
  return WithPrefix(s, absl::StrCat("SubGroupStore: ", context, ": "));
}

template <typename T>
absl::Status Bad(const char* field, const T& value, const std::string& rule) {
  return absl::InvalidArgumentError(
      absl::StrCat("SubGroupStore: ", field, " = ", value, ": ", rule));
}

absl::Status CheckOptions(const SubGroupStoreOptions& o) {
  const std::string arrays = absl::StrCat("{", absl::StrJoin(o.arrays, ", "), "}");
  if (o.arrays.empty()) return Bad("arrays", arrays, "name at least one array");
  std::set<std::string> seen;
  for (const std::string& a : o.arrays) {
    if (a.empty() || !seen.insert(a).second) {
      return Bad("arrays", arrays, absl::StrCat("names must be non-empty and unique ('", a, "')"));
    }
  }
  if (o.numel <= 0) return Bad("numel", o.numel, "must be > 0");
  if (o.sub_group_numel <= 0) return Bad("sub_group_numel", o.sub_group_numel, "must be > 0");
  if ((o.numel - 1) / o.sub_group_numel >= INT_MAX) {
    return Bad("sub_group_numel", o.sub_group_numel,
               absl::StrCat("too small for numel ", o.numel, ": sub-groups are numbered by int"));
  }
  if (o.pool == nullptr) return Bad("pool", "null", "required");
  const std::string device = StoreDeviceName(o.device);
  if (!o.external.empty() && o.external.size() != o.arrays.size()) {
    return Bad("external", absl::StrCat(o.external.size(), " entries"),
               absl::StrCat("must be empty or one per array (", o.arrays.size(), ")"));
  }
  if (o.device == StoreDevice::kHost) return absl::OkStatus();
  if (!o.external.empty()) {
    return Bad("external", absl::StrCat(o.external.size(), " entries"),
               "only for device host (device is " + device + ")");
  }
  if (o.swap == nullptr) return Bad("swap", "null", "required for device " + device);
  if (o.buffer_count < 1) return Bad("buffer_count", o.buffer_count, "must be >= 1");
  if (o.io_timeout <= absl::ZeroDuration()) {
    return Bad("io_timeout", absl::FormatDuration(o.io_timeout), "must be > 0");
  }
  return absl::OkStatus();
}

}  // namespace

// The latest transfer that used a buffer, and how to name it in an error.
struct Transfer {
  IoHandle handle;  // default: finished, the buffer is free
  std::string what;
};

struct SubGroupStore::Impl {
  explicit Impl(const SubGroupStoreOptions& o) : o(o) {}

  int64_t Begin(int g) const { return g * o.sub_group_numel; }
  int64_t Numel(int g) const { return std::min(o.sub_group_numel, o.numel - Begin(g)); }
  std::string Region(int g) const { return absl::StrCat(o.region_prefix, "sg", g); }
  int64_t RegionBytes(int g) const {
    return Numel(g) * int64_t{sizeof(float)} * static_cast<int64_t>(o.arrays.size());
  }

  // Records the first I/O failure: the swapped state may be half-written from then on.
  absl::Status Fail(const Transfer& t, const absl::Status& s) {
    absl::Status e = WithContext(s, t.what);
    if (poison.ok()) poison = e;
    return e;
  }
  absl::Status Wait(Transfer& t) {
    absl::Status s = t.handle.Wait(o.io_timeout);
    // A transfer past its timeout keeps its handle, so that later waits (and the destructor)
    // still know the buffer is in use.
    if (t.handle.done()) t.handle = IoHandle();
    return s.ok() ? s : Fail(t, s);
  }
  absl::Status Start(IoOp op, int g, int b) {
    Transfer& t = in_flight[b];
    const std::string region = Region(g);
    t.what = absl::StrCat(op == IoOp::kRead ? "swap-in" : "swap-out", " of sub-group ", g,
                          " (region '", region, "')");
    absl::StatusOr<IoHandle> h = op == IoOp::kRead ? o.swap->SwapIn(region, blocks[b].data())
                                                   : o.swap->SwapOut(region, blocks[b].data());
    if (!h.ok()) return Fail(t, h.status());
    t.handle = *h;
    return absl::OkStatus();
  }
  absl::Status Drain() {
    absl::Status first;
    for (Transfer& t : in_flight) first.Update(Wait(t));
    return first;
  }
  // kHost: pointers into the arrays; kNvme (buffer != null): the arrays back to back in it.
  SubGroupView View(int g, float* buffer) const {
    SubGroupView v{g, Begin(g), Numel(g), {}};
    for (size_t a = 0; a < o.arrays.size(); ++a) {
      v.arrays.push_back(buffer != nullptr ? buffer + a * v.numel : resident[a] + v.begin);
    }
    return v;
  }
  absl::Status VisitNvme(int first, int n, Access access, const VisitFn& fn);

  const SubGroupStoreOptions& o;
  std::vector<HostBlock> blocks;    // kHost: the arrays the store allocated; kNvme: the buffers
  std::vector<float*> resident;     // kHost: every array, external or not
  std::vector<Transfer> in_flight;  // kNvme: one per buffer
  absl::Status poison;
  bool visiting = false;
};

// Item j of the n sub-groups from `first` uses buffer j % B. A buffer is free for item k once the
// write-out of item k - B finished. Before fn(j), swap-ins are started in order for the items up
// to j + B - 1 whose buffers are free; only item j's own buffer is waited for, so the write-out
// of item j - 1 overlaps fn(j) instead of delaying it, and its buffer's read-ahead starts at the
// next round. kWrite starts no swap-ins: fn overwrites the whole buffer.
absl::Status SubGroupStore::Impl::VisitNvme(int first, int n, Access access, const VisitFn& fn) {
  const int buffers = static_cast<int>(in_flight.size());
  int next = 0;  // the first item whose buffer has not been claimed yet
  auto claim = [&](int j) -> absl::Status {
    for (; next < n && next < j + buffers; ++next) {
      Transfer& t = in_flight[next % buffers];
      if (next > j && !t.handle.done()) break;
      ZT_RETURN_IF_ERROR(Wait(t));
      if (access == Access::kWrite) continue;
      ZT_RETURN_IF_ERROR(Start(IoOp::kRead, first + next, next % buffers));
    }
    return absl::OkStatus();
  };
  absl::Status status;
  for (int j = 0; j < n && status.ok(); ++j) {
    const int b = j % buffers;
    status = claim(j);
    if (status.ok()) status = Wait(in_flight[b]);
    if (status.ok()) status = claim(j);  // that wait may have freed buffers for the read-ahead
    if (!status.ok()) break;
    absl::Status fn_status = fn(View(first + j, blocks[b].as<float>()));
    if (!fn_status.ok()) {
      Drain().IgnoreError();  // an I/O failure here poisons the store; fn's error comes first
      return fn_status;
    }
    if (access != Access::kRead) status = Start(IoOp::kWrite, first + j, b);
  }
  absl::Status drained = Drain();
  return status.ok() ? drained : status;
}

SubGroupStore::SubGroupStore(const SubGroupStoreOptions& options)
    : options_(options), impl_(std::make_unique<Impl>(options_)) {}

SubGroupStore::~SubGroupStore() {
  bool busy = false;
  for (Transfer& t : impl_->in_flight) {
    t.handle.Wait(options_.io_timeout).IgnoreError();
    busy = busy || !t.handle.done();
  }
  // A transfer still running after its timeout reads or writes its buffer: leaking the buffers is
  // better than letting the pool hand that memory to someone else.
  if (busy) static_cast<void>(new std::vector<HostBlock>(std::move(impl_->blocks)));
}

absl::StatusOr<std::unique_ptr<SubGroupStore>> SubGroupStore::Create(
    const SubGroupStoreOptions& options) {
  ZT_RETURN_IF_ERROR(CheckOptions(options));
  std::unique_ptr<SubGroupStore> store(new SubGroupStore(options));
  Impl& m = *store->impl_;
  const SubGroupStoreOptions& o = store->options_;
  if (o.device == StoreDevice::kHost) {
    const int64_t bytes = o.numel * int64_t{sizeof(float)};
    for (int a = 0; a < store->num_arrays(); ++a) {
      if (!o.external.empty() && o.external[a] != nullptr) {
        m.resident.push_back(o.external[a]);
        continue;
      }
      absl::StatusOr<HostBlock> block = o.pool->Allocate(bytes);
      if (!block.ok()) {
        return WithContext(block.status(),
                           absl::StrCat("array '", o.arrays[a], "' (", bytes, " bytes)"));
      }
      std::memset(block->data(), 0, bytes);
      m.resident.push_back(block->as<float>());
      m.blocks.push_back(*std::move(block));
    }
    return store;
  }
  // Buffers before regions: a pool limit then fails before any file is made.
  const int groups = store->num_sub_groups();
  const int buffers = std::min(o.buffer_count, groups);
  const int64_t buffer_bytes = m.RegionBytes(0);  // sub-group 0 is never shorter than the others
  for (int b = 0; b < buffers; ++b) {
    absl::StatusOr<HostBlock> block = o.pool->Allocate(buffer_bytes);
    if (!block.ok()) {
      return WithContext(block.status(), absl::StrCat("buffer ", b, " of ", buffers, " (",
                                                      buffer_bytes, " bytes)"));
    }
    m.blocks.push_back(*std::move(block));
  }
  m.in_flight.resize(buffers);
  for (int g = 0; g < groups; ++g) {
    absl::Status s = o.swap->Reserve(m.Region(g), m.RegionBytes(g));
    if (!s.ok()) return WithContext(s, absl::StrCat("sub-group ", g, " of ", groups));
  }
  return store;
}

absl::Status SubGroupStore::Visit(int64_t begin, int64_t end, Access access, const VisitFn& fn) {
  Impl& m = *impl_;
  // Overwriting everything (a checkpoint load) leaves nothing half-written behind, so it is the
  // one visit a poisoned store allows, and its success heals the store.
  const bool rewrite_all = access == Access::kWrite && begin == 0 && end == numel();
  if (!m.poison.ok() && !rewrite_all) {
    return absl::FailedPreconditionError(
        absl::StrCat("SubGroupStore: unusable after an earlier I/O error (the swapped state may be "
                     "half-written): ",
                     m.poison.message()));
  }
  if (begin < 0 || end > numel() || begin > end) {
    return absl::InvalidArgumentError(
        absl::StrCat("SubGroupStore: Visit(", begin, ", ", end,
                     "): need 0 <= begin <= end <= numel = ", numel()));
  }
  if (begin == end) return absl::OkStatus();
  // The buffers and their transfers belong to one visit at a time.
  if (m.visiting) return absl::FailedPreconditionError("SubGroupStore: Visit inside a Visit");
  const int first = static_cast<int>(begin / options_.sub_group_numel);
  const int n = static_cast<int>((end - 1) / options_.sub_group_numel) - first + 1;
  m.visiting = true;
  // A callback that throws (LibTorch inside an optimizer) is an error like any other, so the
  // visit still drains its transfers and the caller still gets a Status.
  const VisitFn guarded = [&fn](const SubGroupView& v) -> absl::Status {
    try {
      return fn(v);
    } catch (const std::exception& e) {
      return absl::InternalError(absl::StrCat("sub-group ", v.index, ": ", e.what()));
    }
  };
  absl::Status status;
  if (options_.device == StoreDevice::kNvme) {
    if (rewrite_all) m.poison = absl::OkStatus();  // set again if this visit fails too
    status = m.VisitNvme(first, n, access, guarded);
  } else {
    for (int g = first; g < first + n && status.ok(); ++g) {
      status = guarded(m.View(g, nullptr));
    }
  }
  m.visiting = false;
  if (rewrite_all && !status.ok() && m.poison.ok()) m.poison = status;
  return status;
}

float* SubGroupStore::resident(int array) const {
  if (options_.device != StoreDevice::kHost || array < 0 || array >= num_arrays()) return nullptr;
  return impl_->resident[array];
}

int SubGroupStore::num_sub_groups() const {
  return static_cast<int>((options_.numel - 1) / options_.sub_group_numel + 1);
}

// The blocks' capacities (sizes rounded up to the pool's alignment): what the pool accounts.
int64_t SubGroupStore::host_bytes() const {
  int64_t total = 0;
  for (const HostBlock& b : impl_->blocks) total += b.capacity();
  return total;
}

int64_t SubGroupStore::nvme_bytes() const {
  if (options_.device != StoreDevice::kNvme) return 0;
  return options_.numel * int64_t{sizeof(float)} * num_arrays();
}

absl::Status SubGroupStore::health() const { return impl_->poison; }

}  // namespace zerotrain::offload

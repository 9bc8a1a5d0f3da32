// Shm backend: CPU collectives through a shared-memory segment, for ranks that all run on one host.
// Over loopback TCP every byte is copied into the kernel and out again and the copies compete with
// compute for the same cores; here a byte is copied once into the sender's slot and once out by
// each reader. Ops run one at a time, in issue order, on a thread of the backend's own, in chunks
// of one slot, alternating between the segment's two slot sets. A reduction is computed for each
// element by one rank only, in rank order, so every rank ends with bitwise the same result.
#include <ATen/core/Tensor.h>
#include <ATen/ops/add.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/maximum.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "comm/backend.h"
#include "comm/serial_executor.h"
#include "comm/shm_segment.h"
#include "tools/status_macros.h"

namespace zerotrain::comm {
namespace {

// Slots of up to 4 MiB (a chunk stays in cache between its copy in and its copies out), and a
// segment of ~32 MiB for up to 64 ranks (2 x 256 KiB per rank beyond).
size_t SlotBytes(int world) {
  const size_t even = (size_t{16} << 20) / static_cast<size_t>(world) / 4096 * 4096;
  return std::clamp<size_t>(even, size_t{256} << 10, size_t{4} << 20);
}

// One op's result, handed from the backend's thread to whoever waits on the Work.
class Completion {
 public:
  void Finish(absl::Status s) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      status_ = std::move(s);
      done_ = true;
    }
    cv_.notify_all();
  }
  absl::Status Wait(std::chrono::milliseconds limit) {
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_for(lock, limit, [this] { return done_; })) {
      return absl::DeadlineExceededError(
          absl::StrCat("shm: the op did not finish within ", limit.count(), " ms"));
    }
    return status_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  absl::Status status_;
};

at::Tensor View(char* p, int64_t numel, const at::Tensor& like) {
  return at::from_blob(p, {numel}, like.options());
}

class ShmBackend : public Backend {
 public:
  ShmBackend(std::unique_ptr<ShmSegment> seg, std::chrono::milliseconds timeout)
      : seg_(std::move(seg)), timeout_(timeout) {}
  ~ShmBackend() override {
    // Ops still queued fail at once, a running one within ~0.1 s, and the peers learn of it.
    stopping_ = true;
    if (unfinished_ > 0) seg_->Abandon();
    executor_.reset();
  }

  c10::DeviceType device_type() const override { return c10::DeviceType::CPU; }

  absl::StatusOr<Transfer> AllReduce(at::Tensor& tensor, ReduceOp op) override {
    return Launch([this, t = tensor, op] { return RunAllReduce(t, op); });
  }
  absl::StatusOr<Transfer> ReduceScatter(at::Tensor& input, at::Tensor& output,
                                         ReduceOp op) override {
    return Launch([this, in = input, out = output, op] { return RunReduceScatter(in, out, op); });
  }
  absl::StatusOr<Transfer> AllGather(at::Tensor& input, at::Tensor& output) override {
    return Launch([this, in = input, out = output] { return RunAllGather(in, out); });
  }
  bool gathers_into_rows() const override { return true; }
  absl::StatusOr<Transfer> Broadcast(at::Tensor& tensor, int root) override {
    return Launch([this, t = tensor, root] { return RunBroadcast(t, root); });
  }
  absl::StatusOr<Transfer> Barrier() override {
    return Launch([this] {
      const auto deadline = Deadline();
      const Chunk chunk = BeginChunk(kBarrier, at::kByte, 0, 0);
      ZT_RETURN_IF_ERROR(Exchange(chunk, deadline));
      EndChunk();
      return absl::OkStatus();
    });
  }

 private:
  using Body = std::function<absl::Status()>;

  absl::StatusOr<Transfer> Launch(Body body) {
    auto done = std::make_shared<Completion>();
    ++unfinished_;
    executor_->Post([this, body = std::move(body), done] {
      absl::Status s = failed_;
      if (s.ok() && stopping_) s = absl::CancelledError("shm: the group is being destroyed");
      if (s.ok()) {
        try {
          c10::InferenceMode no_autograd;  // the reductions' ATen calls
          s = body();
        } catch (const std::exception& e) {
          s = StatusFromException(e);
        }
      }
      // The peers' phases no longer line up with this rank's: nothing later may run here, and
      // they stop waiting for it.
      if (!s.ok()) {
        seg_->MarkFailed();
        if (failed_.ok()) failed_ = s;
      }
      --unfinished_;
      done->Finish(s);
    });
    // Each op's waits are bounded by the timeout, so the ones queued ahead finish in time too.
    return Transfer{[done, limit = 2 * timeout_ + std::chrono::milliseconds(10000)] {
      return done->Wait(limit);
    }};
  }

  ShmSegment::Deadline Deadline() const { return std::chrono::steady_clock::now() + timeout_; }

  enum Kind : uint64_t { kAllReduce = 1, kReduceScatter, kAllGather, kBroadcast, kBarrier };
  static const char* KindName(uint64_t k) {
    static const char* names[] = {"?",          "all_reduce", "reduce_scatter",
                                  "all_gather", "broadcast",  "barrier"};
    return names[k <= kBarrier ? k : 0];
  }
  // What a chunk belongs to: the op, its dtype, reduction or root, and its size in bytes.
  static uint64_t Signature(Kind kind, at::ScalarType dtype, int tag, int64_t bytes) {
    return (uint64_t{kind} << 56) | (uint64_t(static_cast<uint8_t>(dtype)) << 48) |
           (uint64_t(static_cast<uint8_t>(tag)) << 40) |
           (uint64_t(bytes) & ((uint64_t{1} << 40) - 1));
  }
  static std::string Describe(uint64_t sig) {
    return absl::StrCat(KindName(sig >> 56), " of ", sig & ((uint64_t{1} << 40) - 1), " bytes (",
                        c10::toString(static_cast<at::ScalarType>((sig >> 48) & 0xff)),
                        ", reduction/root ", (sig >> 40) & 0xff, ")");
  }

  // One chunk of an op: the slot set it uses and what it belongs to.
  struct Chunk {
    int set;
    uint64_t signature;
    Kind kind() const { return static_cast<Kind>(signature >> 56); }
  };

  // Starts a chunk, signed with what it belongs to. Two sets are enough: a rank reaches chunk
  // k + 2 only after every peer announced its data of chunk k + 1, which each does only after it
  // finished reading chunk k, so set k % 2 is free again. (With one set a fast rank would
  // overwrite a chunk a slow peer is still copying out.)
  Chunk BeginChunk(Kind kind, at::ScalarType dtype, int tag, int64_t bytes) {
    const Chunk chunk{static_cast<int>(chunks_++ % 2), Signature(kind, dtype, tag, bytes)};
    seg_->Sign(chunk.set, chunk.signature);
    return chunk;
  }

  // Announces this rank's part of the chunk and waits for every rank's.
  absl::Status Sync(const Chunk& chunk, ShmSegment::Deadline deadline) {
    return seg_->WaitAll(seg_->Arrive(), deadline, absl::StrCat("in ", KindName(chunk.kind())));
  }

  // Sync, then checks that every rank's part belongs to the same call (with the call check off,
  // ranks may disagree).
  absl::Status Exchange(const Chunk& chunk, ShmSegment::Deadline deadline) {
    ZT_RETURN_IF_ERROR(Sync(chunk, deadline));
    const int r = seg_->FirstDiffering(chunk.set, chunk.signature);
    if (r < 0) return absl::OkStatus();
    return absl::FailedPreconditionError(absl::StrCat(
        "shm: ranks called different collectives: rank ", seg_->rank(), " called ",
        Describe(chunk.signature), ", rank ", r, " ", Describe(seg_->signature(chunk.set, r))));
  }

  // This rank has read what it needs from the chunk's set.
  void EndChunk() { seg_->Arrive(); }

  // out = the element-wise sum (or max) of `parts`, in their order.
  static void Reduce(const std::vector<at::Tensor>& parts, at::Tensor out, ReduceOp op) {
    if (parts.size() == 1) {
      out.copy_(parts[0]);
      return;
    }
    if (op == ReduceOp::kMax) {
      at::maximum_out(out, parts[0], parts[1]);
      for (size_t j = 2; j < parts.size(); ++j) at::maximum_out(out, out, parts[j]);
    } else {
      at::add_out(out, parts[0], parts[1]);
      for (size_t j = 2; j < parts.size(); ++j) out.add_(parts[j]);
    }
  }

  absl::Status RunAllReduce(const at::Tensor& t, ReduceOp op) {
    const auto deadline = Deadline();
    const int w = seg_->world_size(), me = seg_->rank();
    const int64_t es = t.element_size(), n = t.numel(), chunk_numel = seg_->slot_bytes() / es;
    char* data = static_cast<char*>(t.data_ptr());
    for (int64_t o = 0; o < n; o += chunk_numel) {
      const int64_t c = std::min(chunk_numel, n - o);
      const Chunk chunk = BeginChunk(kAllReduce, t.scalar_type(), static_cast<int>(op), n * es);
      const int set = chunk.set;
      std::memcpy(seg_->slot(set, me), data + o * es, c * es);
      ZT_RETURN_IF_ERROR(Exchange(chunk, deadline));
      // Rank r reduces elements [c*r/w, c*(r+1)/w) of the chunk into its own slot.
      auto lo = [&](int r) { return c * r / w; };
      std::vector<at::Tensor> parts;
      for (int j = 0; j < w; ++j) {
        parts.push_back(View(seg_->slot(set, j) + lo(me) * es, lo(me + 1) - lo(me), t));
      }
      at::Tensor mine = t.narrow(0, o + lo(me), lo(me + 1) - lo(me));
      Reduce(parts, mine, op);
      // An empty share (fewer elements than ranks) may have no storage: memcpy from null is UB.
      if (mine.numel() > 0) {
        std::memcpy(seg_->slot(set, me) + lo(me) * es, mine.data_ptr(), mine.numel() * es);
      }
      ZT_RETURN_IF_ERROR(Sync(chunk, deadline));
      for (int j = 0; j < w; ++j) {
        if (j != me)
          std::memcpy(data + (o + lo(j)) * es, seg_->slot(set, j) + lo(j) * es,
                      (lo(j + 1) - lo(j)) * es);
      }
      EndChunk();
    }
    return absl::OkStatus();
  }

  absl::Status RunReduceScatter(const at::Tensor& in, const at::Tensor& out, ReduceOp op) {
    const auto deadline = Deadline();
    const int w = seg_->world_size(), me = seg_->rank();
    const int64_t es = in.element_size(), n = out.numel();
    const int64_t chunk_numel = seg_->slot_bytes() / es / w;
    const char* src = static_cast<const char*>(in.data_ptr());
    for (int64_t o = 0; o < n; o += chunk_numel) {
      const int64_t c = std::min(chunk_numel, n - o);
      const Chunk chunk =
          BeginChunk(kReduceScatter, in.scalar_type(), static_cast<int>(op), n * es);
      const int set = chunk.set;
      // Piece j of this rank's slot is what it contributes to rank j's shard.
      for (int j = 0; j < w; ++j) {
        std::memcpy(seg_->slot(set, me) + j * c * es, src + (j * n + o) * es, c * es);
      }
      ZT_RETURN_IF_ERROR(Exchange(chunk, deadline));
      std::vector<at::Tensor> parts;
      for (int j = 0; j < w; ++j) parts.push_back(View(seg_->slot(set, j) + me * c * es, c, in));
      Reduce(parts, out.narrow(0, o, c), op);
      EndChunk();
    }
    return absl::OkStatus();
  }

  absl::Status RunAllGather(const at::Tensor& in, const at::Tensor& out) {
    const auto deadline = Deadline();
    const int w = seg_->world_size(), me = seg_->rank();
    const int64_t bytes = in.numel() * in.element_size();
    const char* src = static_cast<const char*>(in.data_ptr());
    char* dst = static_cast<char*>(out.data_ptr());
    // Rank j's part starts j rows in: rows are adjacent unless `out` is the row form.
    const int64_t row = out.dim() == 2 ? out.stride(0) * out.element_size() : bytes;
    const bool in_place = src == dst + me * row;  // the input is this rank's part of the output
    for (int64_t o = 0; o < bytes; o += seg_->slot_bytes()) {
      const int64_t c = std::min<int64_t>(seg_->slot_bytes(), bytes - o);
      const Chunk chunk = BeginChunk(kAllGather, in.scalar_type(), 0, bytes);
      const int set = chunk.set;
      std::memcpy(seg_->slot(set, me), src + o, c);
      ZT_RETURN_IF_ERROR(Exchange(chunk, deadline));
      for (int j = 0; j < w; ++j) {
        if (j != me) {
          std::memcpy(dst + j * row + o, seg_->slot(set, j), c);
        } else if (!in_place) {
          std::memcpy(dst + j * row + o, src + o, c);
        }
      }
      EndChunk();
    }
    return absl::OkStatus();
  }

  absl::Status RunBroadcast(const at::Tensor& t, int root) {
    const auto deadline = Deadline();
    const int me = seg_->rank();
    const int64_t bytes = t.numel() * t.element_size();
    char* data = static_cast<char*>(t.data_ptr());
    for (int64_t o = 0; o < bytes; o += seg_->slot_bytes()) {
      const int64_t c = std::min<int64_t>(seg_->slot_bytes(), bytes - o);
      const Chunk chunk = BeginChunk(kBroadcast, t.scalar_type(), root, bytes);
      const int set = chunk.set;
      if (me == root) std::memcpy(seg_->slot(set, root), data + o, c);
      ZT_RETURN_IF_ERROR(Exchange(chunk, deadline));
      if (me != root) std::memcpy(data + o, seg_->slot(set, root), c);
      EndChunk();
    }
    return absl::OkStatus();
  }

  std::unique_ptr<ShmSegment> seg_;
  std::chrono::milliseconds timeout_;
  // Touched only on the executor's thread.
  uint64_t chunks_ = 0;
  absl::Status failed_;
  std::atomic<bool> stopping_{false};
  std::atomic<int> unfinished_{0};  // ops posted and not yet finished
  std::unique_ptr<SerialExecutor> executor_ = std::make_unique<SerialExecutor>();  // last
};

}  // namespace

absl::StatusOr<std::unique_ptr<Backend>> MakeShmBackend(const BackendContext& ctx) {
  auto seg = ShmSegment::Attach(ctx, SlotBytes(ctx.world_size));
  if (!seg.ok()) return seg.status();
  return std::unique_ptr<Backend>(new ShmBackend(*std::move(seg), ctx.timeout));
}

}  // namespace zerotrain::comm

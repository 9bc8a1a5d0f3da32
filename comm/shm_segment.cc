// ShmSegment: creation through the store, the futex-based phase waits and dead-peer detection.
#include "comm/shm_segment.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <cerrno>
#include <climits>
#include <cstring>
#include <new>
#include <vector>

#include "absl/strings/str_cat.h"
#include "comm/shm_names.h"
#include "tools/status_macros.h"

namespace zerotrain::comm {

constexpr uint64_t kMagic = 0x7a74736867656d31;  // "zt shm segment, layout 1"

struct ShmSegment::Header {
  uint64_t magic;
  uint32_t world;
  uint32_t reserved;
  uint64_t slot_bytes;
  std::atomic<int32_t> failed_rank;  // -1, or a rank that gave up
};

struct alignas(64) ShmSegment::RankControl {
  std::atomic<uint32_t> phase;         // the futex word
  std::atomic<int32_t> pid;            // 0 until the rank has mapped the segment
  std::atomic<uint64_t> signature[2];  // what the rank's chunk in each slot set belongs to
};

static_assert(std::atomic<uint32_t>::is_always_lock_free && sizeof(std::atomic<uint32_t>) == 4,
              "the phase counter doubles as a futex word");

namespace {

std::string HostName() {
  char name[256] = {};
  gethostname(name, sizeof(name) - 1);
  return name;
}

std::string Errno(int err) { return std::strerror(err); }

size_t DataOffset(int world) {
  const size_t controls = 64 + 64 * static_cast<size_t>(world);
  return (controls + 4095) / 4096 * 4096;
}

std::string Get(c10d::Store& store, const std::string& key) {
  std::vector<uint8_t> v = store.get(key);
  return std::string(v.begin(), v.end());
}

void Set(c10d::Store& store, const std::string& key, const std::string& value) {
  store.set(key, std::vector<uint8_t>(value.begin(), value.end()));
}

// Rank 0 could not make the segment: the others learn why instead of waiting for its name.
absl::Status PublishFailure(c10d::Store& store, absl::Status s) {
  try {
    Set(store, "shm/segment", absl::StrCat("!", s.message()));
  } catch (const std::exception&) {
    // The store itself is gone: the others fail on it too.
  }
  return s;
}

}  // namespace

ShmSegment::ShmSegment(int rank, int world, size_t slot_bytes, void* base, size_t bytes)
    : rank_(rank),
      world_(world),
      slot_bytes_(slot_bytes),
      base_(base),
      bytes_(bytes),
      data_offset_(DataOffset(world)) {}

ShmSegment::~ShmSegment() { munmap(base_, bytes_); }

ShmSegment::Header* ShmSegment::header() const { return static_cast<Header*>(base_); }

ShmSegment::RankControl* ShmSegment::control(int r) const {
  return reinterpret_cast<RankControl*>(static_cast<char*>(base_) + 64 + 64 * r);
}

char* ShmSegment::slot(int set, int r) const {
  return static_cast<char*>(base_) + data_offset_ +
         (static_cast<size_t>(set) * world_ + r) * slot_bytes_;
}

absl::StatusOr<std::unique_ptr<ShmSegment>> ShmSegment::Attach(const BackendContext& ctx,
                                                               size_t slot_bytes) {
  const std::string where =
      absl::StrCat("shm backend, rank ", ctx.rank, " of ", ctx.world_size, ": ");
  const size_t bytes = DataOffset(ctx.world_size) + 2 * ctx.world_size * slot_bytes;
  std::string name;
  int fd = -1;
  // From creation until every rank has mapped it (or Attach gave up and removed it), a signal
  // handler may remove the name (shm_names.h).
  struct PendingName {
    ~PendingName() { ClearPendingShmSegment(); }
  } pending;
  try {
    if (ctx.rank == 0) {
      RemoveOrphanShmSegments();  // left by processes killed in this window
      name = NewShmSegmentName();
      fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
      if (fd >= 0) SetPendingShmSegment(name);
      if (fd < 0) {
        return PublishFailure(
            *ctx.store, absl::InternalError(
                            absl::StrCat(where, "creating /dev/shm", name, ": ", Errno(errno))));
      }
      // Reserved now: a /dev/shm too small for a sparse file shows up as SIGBUS on first touch.
      if (int err = posix_fallocate(fd, 0, static_cast<off_t>(bytes)); err != 0) {
        close(fd);
        shm_unlink(name.c_str());
        return PublishFailure(*ctx.store, absl::ResourceExhaustedError(absl::StrCat(
                                              where, "reserving ", bytes, " bytes in /dev/shm for ",
                                              ctx.world_size, " ranks: ", Errno(err),
                                              " (is /dev/shm big enough? `df -h /dev/shm`)")));
      }
    } else {
      // Rank 0 publishes "<host>\n<name>", or "!<its error>" when it could not make the segment.
      const std::string published = Get(*ctx.store, "shm/segment");
      if (!published.empty() && published[0] == '!') {
        return absl::FailedPreconditionError(
            absl::StrCat(where, "rank 0 could not create the segment: ", published.substr(1)));
      }
      const size_t newline = published.find('\n');
      const std::string host0 = published.substr(0, newline);
      name = newline == std::string::npos ? "" : published.substr(newline + 1);
      if (host0 != HostName()) {
        return absl::InvalidArgumentError(absl::StrCat(
            where, "every rank must run on one host, but rank 0 is on '", host0,
            "' and this rank on '", HostName(), "'; use the gloo backend across hosts"));
      }
      fd = shm_open(name.c_str(), O_RDWR, 0);
      if (fd < 0) {
        return absl::InternalError(
            absl::StrCat(where, "opening /dev/shm", name, " made by rank 0: ", Errno(errno)));
      }
      struct stat st = {};
      const bool stat_ok = fstat(fd, &st) == 0;
      if (!stat_ok || static_cast<size_t>(st.st_size) != bytes) {
        const std::string why = stat_ok
                                    ? absl::StrCat("has ", st.st_size, " bytes, expected ", bytes,
                                                   " (do the ranks agree on the world size?)")
                                    : absl::StrCat("cannot be examined: ", Errno(errno));
        close(fd);
        return absl::FailedPreconditionError(absl::StrCat(where, "/dev/shm", name, " ", why));
      }
    }
  } catch (const std::exception& e) {
    if (fd >= 0) close(fd);
    if (ctx.rank == 0 && !name.empty()) shm_unlink(name.c_str());
    return WithPrefix(StatusFromException(e),
                      absl::StrCat(where, "exchanging the segment's name: "));
  }
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int map_errno = errno;
  close(fd);
  if (base == MAP_FAILED) {
    absl::Status s =
        absl::InternalError(absl::StrCat(where, "mapping /dev/shm", name, ": ", Errno(map_errno)));
    if (ctx.rank != 0) return s;
    shm_unlink(name.c_str());
    return PublishFailure(*ctx.store, s);
  }
  std::unique_ptr<ShmSegment> seg(
      new ShmSegment(ctx.rank, ctx.world_size, slot_bytes, base, bytes));
  if (ctx.rank == 0) {
    Header* h = new (base) Header();
    h->magic = kMagic;
    h->world = static_cast<uint32_t>(ctx.world_size);
    h->slot_bytes = slot_bytes;
    h->failed_rank.store(-1);
    for (int r = 0; r < ctx.world_size; ++r)
      new (seg->control(r)) RankControl{{0}, {0}, {{0}, {0}}};
    seg->control(0)->pid.store(getpid());
    try {
      Set(*ctx.store, "shm/segment", absl::StrCat(HostName(), "\n", name));
    } catch (const std::exception& e) {
      shm_unlink(name.c_str());
      return WithPrefix(StatusFromException(e), where);
    }
  } else {
    const Header* h = seg->header();
    if (h->magic != kMagic || h->world != static_cast<uint32_t>(ctx.world_size) ||
        h->slot_bytes != slot_bytes) {
      absl::Status s = absl::FailedPreconditionError(absl::StrCat(
          where, "/dev/shm", name, " was made for ", h->world, " ranks and ", h->slot_bytes,
          "-byte slots, this rank expects ", ctx.world_size, " and ", slot_bytes));
      if (h->magic == kMagic) seg->MarkFailed();  // the layout is ours: the others stop waiting
      return s;
    }
    seg->control(ctx.rank)->pid.store(getpid());
  }
  const uint32_t attached = seg->Arrive();
  absl::Status s = seg->WaitAll(attached, std::chrono::steady_clock::now() + ctx.timeout,
                                "attaching to the segment");
  if (ctx.rank == 0) shm_unlink(name.c_str());  // mapped by all (or given up on): the name can go
  if (!s.ok()) return WithPrefix(s, where);
  return seg;
}

uint32_t ShmSegment::Arrive() {
  ++phase_;
  std::atomic<uint32_t>& word = control(rank_)->phase;
  word.store(phase_, std::memory_order_release);
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
  return phase_;
}

void ShmSegment::Sign(int set, uint64_t signature) {
  control(rank_)->signature[set].store(signature, std::memory_order_relaxed);
}

int ShmSegment::FirstDiffering(int set, uint64_t signature) const {
  for (int r = 0; r < world_; ++r) {
    if (control(r)->signature[set].load(std::memory_order_relaxed) != signature) return r;
  }
  return -1;
}

uint64_t ShmSegment::signature(int set, int r) const {
  return control(r)->signature[set].load(std::memory_order_relaxed);
}

void ShmSegment::Abandon() {
  abandoned_ = true;
  MarkFailed();
}

void ShmSegment::MarkFailed() {
  int32_t none = -1;
  header()->failed_rank.compare_exchange_strong(none, rank_);
}

absl::Status ShmSegment::WaitAll(uint32_t phase, Deadline deadline, const std::string& what) {
  for (int r = 0; r < world_; ++r) {
    if (r == rank_) continue;
    absl::Status s = WaitFor(r, phase, deadline, what);
    if (!s.ok()) {
      MarkFailed();
      return s;
    }
  }
  return absl::OkStatus();
}

absl::Status ShmSegment::WaitFor(int r, uint32_t phase, Deadline deadline,
                                 const std::string& what) {
  std::atomic<uint32_t>& word = control(r)->phase;
  auto reached = [&](uint32_t v) { return static_cast<int32_t>(v - phase) >= 0; };
  // A short spin first: on an idle core the peer is usually microseconds away.
  for (int i = 0; i < 200; ++i) {
    if (reached(word.load(std::memory_order_acquire))) return absl::OkStatus();
#if defined(__x86_64__)
    __builtin_ia32_pause();
#endif
  }
  while (true) {
    const uint32_t v = word.load(std::memory_order_acquire);
    if (reached(v)) return absl::OkStatus();
    // Each reason to give up is checked again against the phase: a peer may have announced it
    // and then exited (at the end of a job) or failed a later op between the two reads.
    const pid_t pid = control(r)->pid.load();
    if (pid > 0 && kill(pid, 0) != 0 && errno == ESRCH) {
      if (reached(word.load(std::memory_order_acquire))) return absl::OkStatus();
      return absl::AbortedError(absl::StrCat("shm: rank ", r, " (pid ", pid, ") exited while rank ",
                                             rank_, " was ", what));
    }
    const int32_t failed = header()->failed_rank.load();
    if ((failed >= 0 && failed != rank_) || abandoned_.load()) {
      if (reached(word.load(std::memory_order_acquire))) return absl::OkStatus();
      if (abandoned_.load()) {
        return absl::CancelledError(absl::StrCat("shm: rank ", rank_,
                                                 "'s group is being destroyed "
                                                 "while it was ",
                                                 what));
      }
      return absl::AbortedError(absl::StrCat("shm: rank ", failed,
                                             " gave up on a collective (see its "
                                             "error) while rank ",
                                             rank_, " was ", what));
    }
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat("shm: timed out ", what, ": rank ", r,
                                                      " did not arrive (it reached phase ", v,
                                                      ", this rank waits for ", phase, ")"));
    }
    // Bounded slices, so exits and failures are seen even if nobody wakes this rank.
    const auto slice =
        std::min<std::chrono::nanoseconds>(deadline - now, std::chrono::milliseconds(100));
    timespec ts{static_cast<time_t>(slice.count() / 1000000000),
                static_cast<long>(slice.count() % 1000000000)};
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAIT, v, &ts, nullptr, 0);
  }
}

}  // namespace zerotrain::comm

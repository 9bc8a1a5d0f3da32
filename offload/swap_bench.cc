// swap_bench: what SwapSpace gets out of the disk, measured against the disk itself in the same
// run: (a) one plain sequential pwrite/pread of the whole size at once on an O_DIRECT file (the
// kernel splits it into as many requests as the device takes), (b) SwapSpace::SwapOut/SwapIn of
// the same bytes in block_size transfers on its thread pool. Both bypass the page cache, so the
// reads come from the disk; neither calls fsync. Prints a table for docs/BENCHMARKS.md.
//
//   bazel run -c opt //offload:swap_bench [-- --dir=/path --mib=1024 --rounds=3
//       --block_kib=1024 --queue_depth=8 --thread_count=2]
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "offload/pinned_host_pool.h"
#include "offload/swap_space.h"

namespace {

using zerotrain::offload::HostBlock;
using zerotrain::offload::IoModeName;

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "swap_bench: %s\n", what.c_str());
  std::exit(1);
}

// The baseline: one file, preallocated like a SwapFile, transferred whole with plain calls.
struct PlainFile {
  std::string path;
  int fd = -1;
  bool direct = false;

  void Create(const std::string& dir, int64_t bytes) {
    path = dir + "/swap_bench_plain_" + std::to_string(getpid());
    int f = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0600);
    if (f < 0 || posix_fallocate(f, 0, bytes) != 0) Die("cannot create " + path);
    close(f);
    fd = open(path.c_str(), O_RDWR | O_DIRECT);
    direct = fd >= 0;
    if (!direct) fd = open(path.c_str(), O_RDWR);
    if (fd < 0) Die("cannot open " + path + ": " + std::strerror(errno));
  }
  ~PlainFile() {
    if (fd >= 0) close(fd);
    if (!path.empty()) unlink(path.c_str());
  }
  // Without O_DIRECT the page cache would answer; flush it so the read goes to the disk.
  void DropCache() {
    if (!direct) {
      fdatasync(fd);
      posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    }
  }
  void Transfer(bool write, char* buf, int64_t bytes) {
    for (int64_t done = 0; done < bytes;) {
      const size_t n = static_cast<size_t>(std::min<int64_t>(bytes - done, int64_t{1} << 30));
      const ssize_t r = write ? pwrite(fd, buf + done, n, done) : pread(fd, buf + done, n, done);
      if (r <= 0) Die(std::string(write ? "pwrite " : "pread ") + path + " failed");
      done += r;
    }
    if (write && !direct) fdatasync(fd);
  }
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  std::string dir = tmp != nullptr ? tmp : "/tmp";
  int64_t mib = 1024, rounds = 3, block_kib = 1024, queue_depth = 8, thread_count = 2;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const size_t eq = a.find('=');
    const std::string key = a.substr(0, eq),
                      value = eq == std::string::npos ? "" : a.substr(eq + 1);
    int64_t* target = key == "--mib"            ? &mib
                      : key == "--rounds"       ? &rounds
                      : key == "--block_kib"    ? &block_kib
                      : key == "--queue_depth"  ? &queue_depth
                      : key == "--thread_count" ? &thread_count
                                                : nullptr;
    if (key == "--dir") {
      dir = value;
    } else if (target == nullptr || !absl::SimpleAtoi(value, target) || *target <= 0) {
      Die("bad flag '" + a +
          "' (flags: --dir, --mib, --rounds, --block_kib, --queue_depth, "
          "--thread_count; numbers positive)");
    }
  }
  const int64_t bytes = mib << 20;

  absl::StatusOr<zerotrain::offload::PinnedHostPool> pool =
      zerotrain::offload::PinnedHostPool::Create({});
  if (!pool.ok()) Die(pool.status().ToString());
  absl::StatusOr<HostBlock> src = pool->Allocate(bytes), dst = pool->Allocate(bytes);
  if (!src.ok() || !dst.ok()) Die("no host memory for 2 x " + std::to_string(mib) + " MiB");
  auto* words = src->as<uint64_t>();
  for (int64_t i = 0; i < bytes / 8; ++i) words[i] = i * 0x9E3779B97F4A7C15ull;

  PlainFile plain;
  plain.Create(dir, bytes);
  zerotrain::offload::SwapSpaceOptions o;
  o.directory = dir;
  o.aio = {block_kib << 10, static_cast<int>(queue_depth), static_cast<int>(thread_count)};
  absl::StatusOr<std::unique_ptr<zerotrain::offload::SwapSpace>> space =
      zerotrain::offload::SwapSpace::Create(o);
  if (!space.ok()) Die(space.status().ToString());
  if (absl::Status s = (*space)->Reserve("bench", bytes); !s.ok()) Die(s.ToString());

  auto ours = [&](bool write) {
    absl::StatusOr<zerotrain::offload::IoHandle> h =
        write ? (*space)->SwapOut("bench", src->data()) : (*space)->SwapIn("bench", dst->data());
    if (!h.ok()) Die(h.status().ToString());
    if (absl::Status s = h->Wait(absl::Minutes(10)); !s.ok()) Die(s.ToString());
  };
  auto check = [&](const char* who) {
    if (std::memcmp(src->data(), dst->data(), bytes) != 0)
      Die(std::string(who) + " read back wrong bytes");
    std::memset(dst->data(), 0, bytes);
  };
  auto mbps = [&](double seconds) { return bytes / seconds / 1e6; };

  std::printf(
      "dir %s, %lld MiB; baseline %s, SwapSpace %s, block_size %lld KiB, queue_depth %lld, "
      "thread_count %lld (%d I/O threads)\n",
      dir.c_str(), static_cast<long long>(mib), plain.direct ? "O_DIRECT" : "buffered",
      IoModeName((*space)->mode()), static_cast<long long>(block_kib),
      static_cast<long long>(queue_depth), static_cast<long long>(thread_count),
      (*space)->io().io_threads());
  if (!plain.direct || (*space)->mode() != zerotrain::offload::IoMode::kDirect) {
    std::printf("warning: no O_DIRECT here; SwapSpace's figures include the page cache\n");
  }
  std::printf(
      "\n| round | seq write MB/s | ours write MB/s | ours/seq | seq read MB/s | "
      "ours read MB/s | ours/seq |\n|---|---|---|---|---|---|---|\n");
  std::vector<double> sw, ow, sr, orr;
  for (int64_t r = 1; r <= rounds; ++r) {
    double t = Now();
    plain.Transfer(true, src->as<char>(), bytes);
    sw.push_back(mbps(Now() - t));
    t = Now();
    ours(true);
    ow.push_back(mbps(Now() - t));
    plain.DropCache();
    t = Now();
    plain.Transfer(false, dst->as<char>(), bytes);
    sr.push_back(mbps(Now() - t));
    check("the plain file");
    t = Now();
    ours(false);
    orr.push_back(mbps(Now() - t));
    check("SwapSpace");
    std::printf("| %lld | %.0f | %.0f | %.2f | %.0f | %.0f | %.2f |\n", static_cast<long long>(r),
                sw.back(), ow.back(), ow.back() / sw.back(), sr.back(), orr.back(),
                orr.back() / sr.back());
    std::fflush(stdout);
  }
  std::printf("| median | %.0f | %.0f | %.2f | %.0f | %.0f | %.2f |\n", Median(sw), Median(ow),
              Median(ow) / Median(sw), Median(sr), Median(orr), Median(orr) / Median(sr));
  return 0;
}

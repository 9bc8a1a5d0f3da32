// Test helpers: temporary directories, aligned random buffers, fault set-ups.
#include "offload/offload_testing.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace zerotrain::offload::testing {

TempDir::TempDir() {
  const char* base = std::getenv("TEST_TMPDIR");
  std::string pattern = absl::StrCat(base != nullptr ? base : "/tmp", "/offload_test_XXXXXX");
  std::vector<char> buf(pattern.begin(), pattern.end());
  buf.push_back('\0');
  if (mkdtemp(buf.data()) == nullptr) {
    ADD_FAILURE() << "mkdtemp " << pattern << ": " << std::strerror(errno);
  }
  path_ = buf.data();
}

TempDir::~TempDir() {
  std::error_code ec;
  // A 0555 directory inside would stop remove_all for a non-root user; reopen it first.
  for (const auto& e : std::filesystem::recursive_directory_iterator(path_, ec)) {
    if (e.is_directory(ec)) chmod(e.path().c_str(), 0755);
  }
  std::filesystem::remove_all(path_, ec);
}

AlignedBuffer MakeAlignedBuffer(int64_t bytes) {
  void* p = nullptr;
  if (posix_memalign(&p, 4096, static_cast<size_t>(bytes)) != 0) return nullptr;
  return AlignedBuffer(static_cast<char*>(p));
}

void FillRandom(void* data, int64_t bytes, uint64_t seed) {
  std::mt19937_64 gen(seed);
  char* p = static_cast<char*>(data);
  for (int64_t i = 0; i < bytes; i += 8) {
    const uint64_t v = gen();
    std::memcpy(p + i, &v, static_cast<size_t>(std::min<int64_t>(8, bytes - i)));
  }
}

std::string FirstDifference(const void* got, const void* want, int64_t bytes) {
  const auto* g = static_cast<const unsigned char*>(got);
  const auto* w = static_cast<const unsigned char*>(want);
  for (int64_t i = 0; i < bytes; ++i) {
    if (g[i] != w[i]) {
      int64_t n = 0;
      for (int64_t j = i; j < bytes; ++j) n += g[j] != w[j];
      return absl::StrCat("byte ", i, " of ", bytes, " is ", int{g[i]}, ", want ", int{w[i]}, " (",
                          n, " bytes differ)");
    }
  }
  return "";
}

std::string UnwritableDirectory(const TempDir& dir, std::string* why) {
  const std::string ro = dir.path() + "/read_only";
  mkdir(ro.c_str(), 0555);
  chmod(ro.c_str(), 0555);
  const std::string probe = ro + "/probe";
  const int fd = open(probe.c_str(), O_CREAT | O_WRONLY, 0600);
  if (fd < 0) {
    *why = "a 0555 directory";
    return ro;
  }
  close(fd);
  unlink(probe.c_str());
  // Root (or CAP_DAC_OVERRIDE) writes through any mode: use a path whose parent is a file.
  const std::string file = dir.path() + "/regular_file";
  std::FILE* f = std::fopen(file.c_str(), "w");
  if (f != nullptr) std::fclose(f);
  *why = "a path below a regular file (running as root: a 0555 mode does not stop writes)";
  return file + "/dir";
}

namespace {

// Forks; the child runs `setup` (an error there means "impossible here") and then `fn(arg)`, and
// sends back "<S|R> <code> <message>" through a pipe.
absl::StatusOr<absl::Status> RunInChild(const std::function<absl::Status()>& setup, ChildFn fn,
                                        const std::string& arg) {
  int fds[2];
  if (pipe(fds) != 0) return absl::ErrnoToStatus(errno, "pipe");
  const pid_t pid = fork();
  if (pid < 0) return absl::ErrnoToStatus(errno, "fork");
  if (pid == 0) {
    close(fds[0]);
    absl::Status s = setup();
    const char kind = s.ok() ? 'R' : 'S';
    if (s.ok()) s = fn(arg);
    const std::string out =
        absl::StrCat(std::string(1, kind), " ", static_cast<int>(s.code()), " ", s.message());
    ssize_t ignored = write(fds[1], out.data(), out.size());
    (void)ignored;
    _exit(0);
  }
  close(fds[1]);
  std::string in;
  char buf[512];
  for (;;) {
    const ssize_t n = read(fds[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    in.append(buf, static_cast<size_t>(n));
  }
  close(fds[0]);
  int wstatus = 0;
  while (waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0 || in.size() < 4) {
    return absl::InternalError(
        absl::StrCat("fault child died (wait status ", wstatus, ", said '", in, "')"));
  }
  const size_t space = in.find(' ', 2);
  absl::Status s(static_cast<absl::StatusCode>(std::atoi(in.substr(2, space - 2).c_str())),
                 space == std::string::npos ? "" : in.substr(space + 1));
  if (in[0] == 'S') return absl::UnavailableError(std::string(s.message()));
  return s;
}

}  // namespace

absl::StatusOr<absl::Status> RunOnSmallTmpfs(int64_t bytes, const std::string& dir, ChildFn fn) {
  return RunInChild(
      [&]() -> absl::Status {
        if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
          return absl::ErrnoToStatus(errno, absl::StrCat("mkdir ", dir));
        }
        if (unshare(CLONE_NEWNS) != 0) return absl::ErrnoToStatus(errno, "unshare(CLONE_NEWNS)");
        // Private, so that the mount does not propagate back into the parent's namespace.
        if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
          return absl::ErrnoToStatus(errno, "mount --make-rprivate /");
        }
        const std::string opts = absl::StrCat("size=", bytes);
        if (mount("tmpfs", dir.c_str(), "tmpfs", 0, opts.c_str()) != 0) {
          return absl::ErrnoToStatus(errno, absl::StrCat("mount -t tmpfs -o ", opts, " ", dir));
        }
        return absl::OkStatus();
      },
      fn, dir);
}

absl::StatusOr<absl::Status> RunWithFileSizeLimit(int64_t limit_bytes, const std::string& arg,
                                                  ChildFn fn) {
  return RunInChild(
      [&]() -> absl::Status {
        signal(SIGXFSZ, SIG_IGN);
        const rlimit rl = {static_cast<rlim_t>(limit_bytes), static_cast<rlim_t>(limit_bytes)};
        if (setrlimit(RLIMIT_FSIZE, &rl) != 0) {
          return absl::ErrnoToStatus(errno, "setrlimit(RLIMIT_FSIZE)");
        }
        return absl::OkStatus();
      },
      fn, arg);
}

std::unique_ptr<SwapSpace> MakeSmallSwapSpace(const std::string& dir) {
  SwapSpaceOptions o;
  o.directory = dir;
  o.aio = {64 << 10, 4, 2};
  absl::StatusOr<std::unique_ptr<SwapSpace>> swap = SwapSpace::Create(o);
  EXPECT_TRUE(swap.ok()) << swap.status();
  return swap.ok() ? *std::move(swap) : nullptr;
}

}  // namespace zerotrain::offload::testing

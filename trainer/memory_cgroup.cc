// MemoryCgroup (memory_cgroup.h): cgroup v1 or v2 memory limits through their files.
#include "trainer/memory_cgroup.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace zerotrain::trainer {
namespace {

absl::Status WriteFile(const std::string& path, const std::string& value) {
  const int fd = open(path.c_str(), O_WRONLY);
  const bool ok = fd >= 0 && write(fd, value.data(), value.size()) == ssize_t(value.size());
  const int err = errno;
  if (fd >= 0) close(fd);
  if (ok) return absl::OkStatus();
  return absl::UnavailableError(
      absl::StrCat("writing ", value, " to ", path, ": ", std::strerror(err)));
}

}  // namespace

MemoryCgroup::~MemoryCgroup() {
  if (dir_.empty()) return;
  // Bounded: the processes that were in it have been reaped by now, so it empties at once.
  for (int i = 0; i < 50 && rmdir(dir_.c_str()) != 0 && errno == EBUSY; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

absl::Status MemoryCgroup::Enter() const {
  return WriteFile(dir_ + "/cgroup.procs", std::to_string(getpid()));
}

absl::Status MemoryCgroup::Leave() const {
  return WriteFile(home_ + "/cgroup.procs", std::to_string(getpid()));
}

int64_t MemoryCgroup::OomKills() const {
  std::stringstream s;
  s << std::ifstream(dir_ + events_).rdbuf();
  const size_t at = s.str().find("oom_kill ");
  return at == std::string::npos ? -1 : std::atoll(s.str().c_str() + at + 9);
}

absl::StatusOr<std::unique_ptr<MemoryCgroup>> MemoryCgroup::Create(int64_t limit_bytes) {
  std::stringstream controllers, self;
  controllers << std::ifstream("/sys/fs/cgroup/cgroup.controllers").rdbuf();
  self << std::ifstream("/proc/self/cgroup").rdbuf();
  const bool v2 = absl::StrContains(controllers.str(), "memory");
  const std::string mount = v2 ? "/sys/fs/cgroup" : "/sys/fs/cgroup/memory";
  const std::string limit = v2 ? "memory.max" : "memory.limit_in_bytes";
  const std::string own_tag = v2 ? "" : "memory";
  std::string own;  // this process's cgroup: "0::/path" (v2), "N:...memory...:/path" (v1)
  for (absl::string_view line : absl::StrSplit(self.str(), '\n')) {
    std::vector<std::string> p = absl::StrSplit(line, absl::MaxSplits(':', 2));
    std::vector<std::string> names = absl::StrSplit(p.size() == 3 ? p[1] : "x", ',');
    if (p.size() == 3 && std::count(names.begin(), names.end(), own_tag) > 0) own = p[2];
  }
  std::unique_ptr<MemoryCgroup> cap(new MemoryCgroup());
  cap->home_ = mount + own;
  cap->events_ = v2 ? "/memory.events" : "/memory.oom_control";
  if (own.empty() || !std::filesystem::exists(cap->home_ + "/cgroup.procs")) {
    return absl::UnavailableError(absl::StrCat(
        "no memory cgroup: ", v2 ? "" : "/sys/fs/cgroup/cgroup.controllers lacks memory (v2) and ",
        mount, own, "/cgroup.procs (this process's, /proc/self/cgroup) does not exist"));
  }
  // Inside this process's own cgroup, so whatever caps it still applies; else at the root (v2
  // allows no controllers below a cgroup that holds processes).
  absl::Status last;
  const std::string bytes = std::to_string(limit_bytes);
  for (const std::string& parent : {cap->home_, mount}) {
    cap->dir_ = absl::StrCat(parent, "/zt_memory_cap_", getpid());
    std::error_code ec;
    if (!std::filesystem::create_directory(cap->dir_, ec)) {
      last = absl::UnavailableError(absl::StrCat("mkdir ", cap->dir_, ": ", ec.message()));
      continue;
    }
    const bool memsw = !v2 && std::filesystem::exists(cap->dir_ + "/memory.memsw.limit_in_bytes");
    last = WriteFile(cap->dir_ + "/" + limit, bytes);
    if (last.ok() && memsw) last = WriteFile(cap->dir_ + "/memory.memsw.limit_in_bytes", bytes);
    cap->how_ = absl::StrCat("cgroup ", v2 ? "v2 " : "v1 ", limit,
                             memsw ? " and memory.memsw.limit_in_bytes" : "", " = ", bytes, " in ",
                             cap->dir_);
    if (last.ok()) return cap;
    rmdir(cap->dir_.c_str());
  }
  cap->dir_.clear();
  return last;
}

}  // namespace zerotrain::trainer

// Segment names, the orphan sweep, and the pending name a signal handler removes.
#include "comm/shm_names.h"

#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace zerotrain::comm {
namespace {

// "/dev/shm/" + a name of ours: fits with room to spare (pids and randoms are short).
char g_pending_path[128] = {};
std::atomic<bool> g_pending{false};

bool Alive(pid_t pid) { return pid > 0 && (kill(pid, 0) == 0 || errno == EPERM); }

// The creator and launcher pids of a segment name of ours, false when it is not one.
bool ParseName(const std::string& file_name, pid_t* creator, pid_t* launcher) {
  if (file_name.rfind(kShmSegmentPrefix, 0) != 0) return false;
  const std::vector<std::string> parts =
      absl::StrSplit(file_name.substr(std::strlen(kShmSegmentPrefix)), '-');
  int64_t c = 0, l = 0;
  if (parts.size() != 3 || parts[1].empty() || parts[1][0] != 'L' ||
      !absl::SimpleAtoi(parts[0], &c) || !absl::SimpleAtoi(parts[1].substr(1), &l)) {
    return false;
  }
  *creator = static_cast<pid_t>(c);
  *launcher = static_cast<pid_t>(l);
  return true;
}

}  // namespace

std::string NewShmSegmentName() {
  const char* launcher = std::getenv("ZT_LAUNCHER_PID");
  std::random_device random;
  return absl::StrCat("/", kShmSegmentPrefix, getpid(), "-L",
                      launcher != nullptr ? std::string(launcher) : std::to_string(getppid()), "-",
                      random(), random());
}

pid_t LauncherOfShmSegment(const std::string& file_name) {
  pid_t creator = 0, launcher = 0;
  return ParseName(file_name, &creator, &launcher) ? launcher : -1;
}

int RemoveOrphanShmSegments(pid_t launcher, const std::string& dir) {
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return 0;
  std::vector<std::string> doomed;
  while (const dirent* e = readdir(d)) {
    pid_t creator = 0, made_under = 0;
    if (!ParseName(e->d_name, &creator, &made_under)) continue;
    // A live creator or launcher may still be setting the segment up; pid reuse only spares one.
    const bool orphan =
        launcher > 0 ? made_under == launcher : !Alive(creator) && !Alive(made_under);
    if (orphan) doomed.push_back(absl::StrCat(dir, "/", e->d_name));
  }
  closedir(d);
  int removed = 0;
  for (const std::string& path : doomed) removed += unlink(path.c_str()) == 0 ? 1 : 0;
  return removed;
}

void SetPendingShmSegment(const std::string& name) {
  g_pending.store(false);
  const std::string path = absl::StrCat("/dev/shm", name);
  if (path.size() >= sizeof(g_pending_path)) return;
  std::memcpy(g_pending_path, path.c_str(), path.size() + 1);
  g_pending.store(true);
}

void ClearPendingShmSegment() { g_pending.store(false); }

void UnlinkPendingShmSegment() {
  // unlink is async-signal-safe (shm_unlink is not listed); a second unlink is harmless.
  if (g_pending.load()) unlink(g_pending_path);
}

}  // namespace zerotrain::comm

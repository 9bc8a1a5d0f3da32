// The names of the shm backend's /dev/shm segments, and their clean-up. A segment's name is
// removed as soon as every rank has mapped it (shm_segment.h), so only a process stopped during
// that start-up window can leave one behind. The name says who made it,
// /zt-shm-<creator pid>-L<launcher pid>-<random>, so such orphans can be found: the launcher
// removes its job's after its ranks have exited, and rank 0 removes those of dead processes
// before it makes a new one. A process about to die removes the one it is setting up
// (UnlinkPendingShmSegment): a handler that ends the process, or //trainer:main's stop watchdog.
// Never one that lets the process go on: a peer yet to open the segment would fail to.
#pragma once

#include <sys/types.h>

#include <string>

namespace zerotrain::comm {

inline constexpr char kShmSegmentPrefix[] = "zt-shm-";

// A fresh name for a segment made by this process ("/zt-shm-..."): the launcher's pid comes from
// ZT_LAUNCHER_PID (set by LaunchRanks), else the parent's.
std::string NewShmSegmentName();

// The launcher pid in a segment name of ours (without the leading '/'), or -1 when it is not one.
pid_t LauncherOfShmSegment(const std::string& file_name);

// Removes from `dir` (/dev/shm) the segments of ours that `launcher` (> 0) made, or, with
// launcher 0, those whose creator and launcher are both gone. Returns how many it removed.
int RemoveOrphanShmSegments(pid_t launcher = 0, const std::string& dir = "/dev/shm");

// The segment being set up (rank 0, between creating it and every rank mapping it): its name is
// kept where a signal handler can reach it without allocating.
void SetPendingShmSegment(const std::string& name);
void ClearPendingShmSegment();
// Async-signal-safe: removes the pending segment's name, if any.
void UnlinkPendingShmSegment();

}  // namespace zerotrain::comm

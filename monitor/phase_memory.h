// PhaseMemory: the peak memory of each phase of a run (start-up, construction, partitioning,
// checkpoint load, eval, forward, backward, optimizer step, checkpoint save, end), so a run shows
// where its memory goes instead of one process-wide peak. For each phase: the resident set's
// high-water mark (reset at each phase through /proc/self/clear_refs), the host bytes the engine
// counts (offload/memory_roles.h: CPU tensors and pool blocks) at their peak with the split by
// role at that moment, and on CUDA the caching allocator's allocated and reserved peaks.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "monitor/scalar.h"
#include "offload/memory_roles.h"

namespace zerotrain::monitor {

enum class MemoryPhase : int {
  kStartUp,  // from the process's start: the runtime, the data
  kConstruction,
  kPartitioning,  // Engine::Create: flattening, sharding, the optimizer's states
  kCheckpointLoad,
  kEval,
  kForward,
  kBackward,
  kStep,
  kCheckpointSave,
  kEnd,  // after the last step: the final gather and the generated sample
};
inline constexpr int kNumMemoryPhases = 10;

const char* MemoryPhaseName(MemoryPhase phase);  // "checkpoint load"
const char* MemoryPhaseKey(MemoryPhase phase);   // "checkpoint_load", for metric names

struct PhasePeak {
  bool entered = false;
  int64_t rss_bytes = 0;
  offload::HostBytesByRole allocated;  // counted host bytes at their peak, split by role
  int64_t device_allocated_bytes = 0;  // CUDA only
  int64_t device_reserved_bytes = 0;
};
using PhasePeaks = std::array<PhasePeak, kNumMemoryPhases>;

class PhaseMemory {
 public:
  // `cuda_device`: the rank's CUDA device index, or -1 on the CPU. The current phase is
  // kStartUp, whose RSS peak counts from the process's start.
  explicit PhaseMemory(int cuda_device);

  // Records the current phase's peaks and starts `phase` with fresh ones. Entering a phase
  // again (each micro-batch's forward) keeps the largest of its peaks.
  void Enter(MemoryPhase phase);
  MemoryPhase current() const { return current_; }

  // Every phase's peaks so far, the current one's up to now.
  PhasePeaks Peaks() const;

  // Whether each phase's RSS is its own: false where /proc/self/clear_refs could not reset the
  // high-water mark (not Linux, or a kernel before 4.0), and then a phase's RSS peak is the
  // process's up to the phase's end.
  bool rss_per_phase() const { return rss_per_phase_; }

 private:
  PhasePeak ReadCurrent() const;

  int cuda_device_;
  bool rss_per_phase_;
  MemoryPhase current_ = MemoryPhase::kStartUp;
  PhasePeaks recorded_{};
};

// The largest of each field over several peaks (e.g. over ranks): a field-wise maximum, with
// the role split of the largest allocated peak.
PhasePeak MaxPeak(const PhasePeak& a, const PhasePeak& b);
// The same for a whole run: the largest peak of any phase.
PhasePeak RunPeak(const PhasePeaks& peaks);

// For one all-reduce(max) over ranks: kPhaseFields doubles per phase, and back.
inline constexpr int kPhaseFields = 5 + offload::kNumMemoryRoles;
std::vector<double> ToDoubles(const PhasePeaks& peaks);
PhasePeaks FromDoubles(const std::vector<double>& values);

// The metrics' columns, per phase: peak_rss_mb_<key>, peak_allocated_mb_<key>, and with
// `device` device_peak_allocated_mb_<key> and device_peak_reserved_mb_<key>; and a row's values
// for the phases entered so far.
std::vector<std::string> PhaseColumns(bool device);
std::vector<Scalar> PhaseScalars(const PhasePeaks& peaks, bool device);

// The summary's table, one line per phase entered (MiB): RSS peak, allocated peak and the
// largest part of it, and on CUDA the device peaks. Every line starts with `indent`.
std::string PhaseTable(const PhasePeaks& peaks, bool device, const std::string& indent);

}  // namespace zerotrain::monitor

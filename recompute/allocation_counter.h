// AllocationCounter: a counting wrapper around LibTorch's CPU allocator, installed for the
// counter's lifetime, so tests and benchmarks measure how many bytes of CPU tensor storage are
// alive at a point (e.g. the activations a forward pass leaves for backward) instead of
// estimating them. Only storage allocated while a counter is installed is counted.
#pragma once

#include <cstdint>

namespace c10 {
struct Allocator;
}

namespace zerotrain::recompute {

class AllocationCounter {
 public:
  // Installs the wrapper over the current CPU allocator; one counter at a time per process.
  AllocationCounter();
  // Puts the previous allocator back. Storage allocated meanwhile stays valid and is still
  // released through the wrapper, which lives for the whole process.
  ~AllocationCounter();
  AllocationCounter(const AllocationCounter&) = delete;
  AllocationCounter& operator=(const AllocationCounter&) = delete;

  // Bytes allocated through the wrapper since it was installed and not yet freed.
  int64_t live_bytes() const;
  // The highest live_bytes() since install or the last ResetPeak().
  int64_t peak_bytes() const;
  void ResetPeak();

 private:
  c10::Allocator* previous_;
};

}  // namespace zerotrain::recompute

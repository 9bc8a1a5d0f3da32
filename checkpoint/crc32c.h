// CRC32C (Castagnoli), the checksum of checkpoint files (and of TensorBoard records, whose writer
// in monitor/ uses this one). Our own code: the SSE4.2 crc32 instruction eight bytes at a
// time where the CPU has it (several GB/s, so verifying a checkpoint keeps pace with the disk),
// else slicing-by-8 tables. Both compute the same function.
#pragma once

#include <cstddef>
#include <cstdint>

namespace zerotrain::checkpoint {

// Extends `crc` (the CRC32C of the bytes before) over `n` more bytes; start from 0.
uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t n);
inline uint32_t Crc32c(const void* data, size_t n) { return Crc32cExtend(0, data, n); }
// The CRC32C of A followed by B from the CRCs of each and B's length, in O(log len_b): a file
// whose parts are written out of order (a header written last) is still checksummed in one pass.
uint32_t Crc32cConcat(uint32_t crc_a, uint32_t crc_b, uint64_t len_b);
// The same for many B of one length: the O(log len) work done once, each Concat 32 steps.
class Crc32cShift {
 public:
  explicit Crc32cShift(uint64_t len_b);
  uint32_t Concat(uint32_t crc_a, uint32_t crc_b) const;

 private:
  uint32_t image_[32];  // crc(A) -> crc(A followed by len_b zero bytes), bare register
};

// The table path whatever the CPU (the tests compare both paths with a bitwise reference).
uint32_t Crc32cPortable(uint32_t crc, const void* data, size_t n);
bool Crc32cUsesHardware();

}  // namespace zerotrain::checkpoint

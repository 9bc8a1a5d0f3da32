// CRC32C (Castagnoli), the checksum TensorBoard's record framing uses, and its masked form.
// Our own table-driven code; the SSE4.2 crc32 instruction is used when the CPU has it.
#pragma once

#include <cstddef>
#include <cstdint>

namespace zerotrain::metrics {

// CRC32C of `data[0, size)`, continuing from `crc` (0 for a fresh checksum).
uint32_t Crc32c(const void* data, size_t size, uint32_t crc = 0);

// The portable table-driven path, whatever the CPU (tests compare it with the fast path).
uint32_t Crc32cTable(const void* data, size_t size, uint32_t crc = 0);

// Whether Crc32c uses the SSE4.2 instruction on this machine.
bool Crc32cUsesHardware();

// TFRecord's masking, so that a CRC stored next to the data it covers does not checksum cleanly
// when the record is itself embedded in checksummed data.
inline uint32_t MaskCrc(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }
inline uint32_t UnmaskCrc(uint32_t masked) {
  const uint32_t rot = masked - 0xa282ead8u;
  return (rot >> 17) | (rot << 15);
}

}  // namespace zerotrain::metrics

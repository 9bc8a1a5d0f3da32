// CRC32C (Castagnoli), the checksum of checkpoint files. A small table-driven software version:
// checkpoint/ must not depend on trainer/ (whose metrics have their own), and checksumming runs
// at disk speed, well below what even this byte-wise loop does.
#pragma once

#include <cstddef>
#include <cstdint>

namespace zerotrain::checkpoint {

// Extends `crc` (the CRC32C of the bytes before) over `n` more bytes; start from 0.
uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t n);
inline uint32_t Crc32c(const void* data, size_t n) { return Crc32cExtend(0, data, n); }

}  // namespace zerotrain::checkpoint

// TFRecord's masked CRC32C, as TensorBoard's event files frame each record: masking keeps a CRC
// stored next to the data it covers from checksumming cleanly when the record is itself embedded
// in checksummed data. The CRC32C is checkpoint/'s.
#pragma once

#include <cstddef>
#include <cstdint>

#include "checkpoint/crc32c.h"

namespace zerotrain::monitor {

inline uint32_t MaskCrc(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }
inline uint32_t MaskedCrc32c(const void* data, size_t size) {
  return MaskCrc(checkpoint::Crc32c(data, size));
}

}  // namespace zerotrain::monitor

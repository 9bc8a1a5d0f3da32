// Fixed-width little-endian integers for the checkpoint file headers, independent of the host.
#pragma once

#include <cstdint>
#include <string>

namespace zerotrain::checkpoint {

inline void PutLittleEndian(std::string* out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

inline uint64_t GetLittleEndian(const char* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(static_cast<uint8_t>(p[i])) << (8 * i);
  return v;
}

}  // namespace zerotrain::checkpoint

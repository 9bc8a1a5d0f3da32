// CRC32C: a byte-at-a-time table (reflected polynomial 0x82F63B78) and, on x86-64 with SSE4.2,
// the crc32 instruction eight bytes at a time. Both compute the same function.
#include "trainer/metrics/crc32c.h"

#include <array>
#include <cstring>

namespace zerotrain::metrics {
namespace {

constexpr uint32_t kPolynomial = 0x82F63B78u;  // Castagnoli, bit-reflected

std::array<uint32_t, 256> MakeTable() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ kPolynomial : c >> 1;
    table[i] = c;
  }
  return table;
}

const std::array<uint32_t, 256>& Table() {
  static const std::array<uint32_t, 256> table = MakeTable();
  return table;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint32_t Crc32cHardware(const uint8_t* p, size_t n,
                                                          uint32_t crc) {
  uint64_t c = ~crc;
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);  // unaligned-safe; x86 is little-endian like the table path
    c = __builtin_ia32_crc32di(c, word);
  }
  uint32_t c32 = static_cast<uint32_t>(c);
  for (; n > 0; --n, ++p) c32 = __builtin_ia32_crc32qi(c32, *p);
  return ~c32;
}

bool DetectHardware() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("sse4.2");
}
#endif

}  // namespace

uint32_t Crc32cTable(const void* data, size_t size, uint32_t crc) {
  const auto& table = Table();
  const auto* p = static_cast<const uint8_t*>(data);
  uint32_t c = ~crc;
  for (size_t i = 0; i < size; ++i) c = table[(c ^ p[i]) & 0xFFu] ^ (c >> 8);
  return ~c;
}

bool Crc32cUsesHardware() {
#if defined(__x86_64__)
  static const bool has = DetectHardware();
  return has;
#else
  return false;
#endif
}

uint32_t Crc32c(const void* data, size_t size, uint32_t crc) {
#if defined(__x86_64__)
  if (Crc32cUsesHardware()) return Crc32cHardware(static_cast<const uint8_t*>(data), size, crc);
#endif
  return Crc32cTable(data, size, crc);
}

}  // namespace zerotrain::metrics

// CRC32C over the reflected polynomial 0x82F63B78: SSE4.2 when present, else slicing-by-8.
#include "checkpoint/crc32c.h"

#include <array>
#include <cstring>

namespace zerotrain::checkpoint {
namespace {

using Tables = std::array<std::array<uint32_t, 256>, 8>;

Tables MakeTables() {
  Tables t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    t[0][i] = c;
  }
  for (int k = 1; k < 8; ++k) {
    for (int i = 0; i < 256; ++i) t[k][i] = (t[k - 1][i] >> 8) ^ t[0][t[k - 1][i] & 0xFF];
  }
  return t;
}

const Tables& GetTables() {
  static const Tables tables = MakeTables();
  return tables;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint32_t Crc32cHardware(uint32_t crc, const uint8_t* p,
                                                          size_t n) {
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
#endif

}  // namespace

bool Crc32cUsesHardware() {
#if defined(__x86_64__)
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("sse4.2") != 0;
  }();
  return has;
#else
  return false;
#endif
}

uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t n) {
#if defined(__x86_64__)
  if (Crc32cUsesHardware()) return Crc32cHardware(crc, static_cast<const uint8_t*>(data), n);
#endif
  return Crc32cPortable(crc, data, n);
}

uint32_t Crc32cPortable(uint32_t crc, const void* data, size_t n) {
  const Tables& t = GetTables();
  const auto* p = static_cast<const uint8_t*>(data);
  uint32_t c = ~crc;
  while (n >= 8) {
    // Little-endian assembly, so the result does not depend on the host's byte order.
    const uint32_t lo =
        c ^ (uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24);
    c = t[7][lo & 0xFF] ^ t[6][(lo >> 8) & 0xFF] ^ t[5][(lo >> 16) & 0xFF] ^ t[4][lo >> 24] ^
        t[3][p[4]] ^ t[2][p[5]] ^ t[1][p[6]] ^ t[0][p[7]];
    p += 8;
    n -= 8;
  }
  while (n-- > 0) c = (c >> 8) ^ t[0][(c ^ *p++) & 0xFF];
  return ~c;
}

namespace {

// A linear map over GF(2) on the 32-bit CRC register, as the images of its 32 unit vectors.
struct RegisterMap {
  uint32_t image[32];
};

uint32_t Apply(const uint32_t* image, uint32_t v) {
  uint32_t out = 0;
  for (int i = 0; v != 0; ++i, v >>= 1) {
    if (v & 1) out ^= image[i];
  }
  return out;
}

RegisterMap Twice(const RegisterMap& m) {
  RegisterMap out;
  for (int i = 0; i < 32; ++i) out.image[i] = Apply(m.image, m.image[i]);
  return out;
}

}  // namespace

Crc32cShift::Crc32cShift(uint64_t len_b) {
  // With init and xor-out both ~0 they cancel: crc(A || B) = shift(crc(A), |B| zero bytes) ^
  // crc(B), where shift runs the bare register over zeros. One zero bit: shift right, fold the
  // polynomial in when bit 0 was set; squaring that map reaches a byte, then each power of two.
  RegisterMap bit;
  bit.image[0] = 0x82F63B78u;
  for (int i = 1; i < 32; ++i) bit.image[i] = 1u << (i - 1);
  for (int bits = 1; bits < 8; bits *= 2) bit = Twice(bit);
  // The identity, then composed with each power of two len_b holds.
  for (int i = 0; i < 32; ++i) image_[i] = 1u << i;
  for (RegisterMap power = bit; len_b != 0; len_b >>= 1, power = Twice(power)) {
    if (len_b & 1) {
      for (int i = 0; i < 32; ++i) image_[i] = Apply(power.image, image_[i]);
    }
  }
}

uint32_t Crc32cShift::Concat(uint32_t crc_a, uint32_t crc_b) const {
  return Apply(image_, crc_a) ^ crc_b;
}

uint32_t Crc32cConcat(uint32_t crc_a, uint32_t crc_b, uint64_t len_b) {
  return Crc32cShift(len_b).Concat(crc_a, crc_b);
}

}  // namespace zerotrain::checkpoint

#include "dataplane/fwd/hash_model.h"

namespace heddle::fwd {
namespace {

// 256-entry tables for reflected CRCs, built at compile time.
template <typename T>
constexpr std::array<T, 256> ReflectedTable(T poly) {
  std::array<T, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    T c = static_cast<T>(i);
    for (int k = 0; k < 8; ++k)
      c = (c & 1) ? static_cast<T>((c >> 1) ^ poly) : static_cast<T>(c >> 1);
    table[i] = c;
  }
  return table;
}

constexpr std::array<uint32_t, 256> kCrc32Table = ReflectedTable<uint32_t>(0xEDB88320u);
constexpr std::array<uint32_t, 256> kCrc32cTable = ReflectedTable<uint32_t>(0x82F63B78u);
constexpr std::array<uint16_t, 256> kCrc16Table = ReflectedTable<uint16_t>(0xA001u);

template <typename T>
T RunReflected(const std::array<T, 256>& table, T crc, const uint8_t* data, size_t len) {
  for (size_t i = 0; i < len; ++i) {
    crc = static_cast<T>(table[(crc ^ data[i]) & 0xFF] ^ (crc >> 8));
  }
  return crc;
}

}  // namespace

std::array<uint8_t, kFlowKey4Bytes> FlowKey4(uint32_t src, uint32_t dst, uint8_t proto,
                                             uint16_t sport, uint16_t dport) {
  return {static_cast<uint8_t>(src >> 24),
          static_cast<uint8_t>(src >> 16),
          static_cast<uint8_t>(src >> 8),
          static_cast<uint8_t>(src),
          static_cast<uint8_t>(dst >> 24),
          static_cast<uint8_t>(dst >> 16),
          static_cast<uint8_t>(dst >> 8),
          static_cast<uint8_t>(dst),
          proto,
          static_cast<uint8_t>(sport >> 8),
          static_cast<uint8_t>(sport),
          static_cast<uint8_t>(dport >> 8),
          static_cast<uint8_t>(dport)};
}

std::array<uint8_t, kFlowKey6Bytes> FlowKey6(const uint8_t* src16, const uint8_t* dst16,
                                             uint8_t proto, uint16_t sport, uint16_t dport) {
  std::array<uint8_t, kFlowKey6Bytes> key{};
  for (int i = 0; i < 16; ++i) {
    key[i] = src16[i];
    key[16 + i] = dst16[i];
  }
  key[32] = proto;
  key[33] = static_cast<uint8_t>(sport >> 8);
  key[34] = static_cast<uint8_t>(sport);
  key[35] = static_cast<uint8_t>(dport >> 8);
  key[36] = static_cast<uint8_t>(dport);
  return key;
}

uint32_t Crc32(uint32_t init, const uint8_t* data, size_t len) {
  return RunReflected(kCrc32Table, init, data, len) ^ 0xFFFFFFFFu;
}

uint32_t Crc32c(uint32_t init, const uint8_t* data, size_t len) {
  return RunReflected(kCrc32cTable, init, data, len) ^ 0xFFFFFFFFu;
}

uint16_t Crc16Arc(uint16_t init, const uint8_t* data, size_t len) {
  return RunReflected(kCrc16Table, init, data, len);
}

uint32_t SwitchHash(HashFunction function, uint32_t seed, std::span<const uint8_t> key) {
  switch (function) {
    case HashFunction::kCrc32:
      return Crc32(seed, key.data(), key.size());
    case HashFunction::kCrc32c:
      return Crc32c(seed, key.data(), key.size());
    case HashFunction::kCrc16:
      return Crc16Arc(static_cast<uint16_t>(seed), key.data(), key.size());
    case HashFunction::kUnknown:
      break;
  }
  return 0;
}

uint32_t EcmpMember(HashFunction function, uint32_t seed, uint8_t bit_offset,
                    std::span<const uint8_t> key, uint32_t n) {
  if (n == 0 || function == HashFunction::kUnknown) return 0;
  const uint32_t h = SwitchHash(function, seed, key);
  const uint32_t shifted = bit_offset >= 32 ? 0 : h >> bit_offset;
  return shifted % n;
}

uint32_t SportContribution(HashFunction function, uint16_t sport) {
  std::array<uint8_t, kFlowKey4Bytes> zero{};
  std::array<uint8_t, kFlowKey4Bytes> with_sport{};
  with_sport[kFlowKeySportOffset4] = static_cast<uint8_t>(sport >> 8);
  with_sport[kFlowKeySportOffset4 + 1] = static_cast<uint8_t>(sport);
  return SwitchHash(function, 0, with_sport) ^ SwitchHash(function, 0, zero);
}

}  // namespace heddle::fwd

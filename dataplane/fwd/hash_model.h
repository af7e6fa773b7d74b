// File: dataplane/fwd/hash_model.h
//
// The switch ECMP hash Nüwa models (control/nuwa/fabric.h HashModel, docs/nuwa.md §5): a switch
// hashes a packet's 5-tuple key with a CRC whose register starts at the switch's seed, shifts the
// result right by its tier's bit offset and takes it modulo the number n of usable up ports; the
// result indexes those ports in ascending order.
//
//   std::array<uint8_t, 13> key = FlowKey4(src, dst, /*proto=*/17, sport, 4791);
//   uint32_t member = EcmpMember(HashFunction::kCrc32, seed, bit_offset, key, n);
//
// The functions, each reflected (LSB-first) and table-driven, with the register preset to the
// seed instead of the catalogue's initial value:
//   kCrc32   CRC-32 (zlib/IEEE 802.3, polynomial 0x04C11DB7, reflected 0xEDB88320), final XOR
//            0xFFFFFFFF. seed 0xFFFFFFFF gives the catalogue CRC-32: "123456789" -> 0xCBF43926.
//   kCrc32c  CRC-32C (Castagnoli, 0x1EDC6F41, reflected 0x82F63B78), final XOR 0xFFFFFFFF.
//            seed 0xFFFFFFFF: "123456789" -> 0xE3069283.
//   kCrc16   CRC-16/ARC (the "BISYNC" CRC-16 of switch ASICs: 0x8005, reflected 0xA001), no final
//            XOR, the low 16 bits of the seed as the register. seed 0: "123456789" -> 0xBB3D.
// Every one is affine in the key over GF(2): H(seed, k ^ d) = H(seed, k) ^ H(0, d) ^ H(0, 0) for
// keys of equal length. The compiler's entropy choice rests on that (control/nuwa/compiler.h).
//
// Key layout (network byte order): IPv4 src (4) dst (4) proto (1) sport (2) dport (2) = 13 bytes;
// IPv6 src (16) dst (16) proto (1) sport (2) dport (2) = 37 bytes. In both the source port is
// followed by exactly 2 bytes, so its contribution to the CRC is the same for both families.
//
// No allocation, no state: safe on the hot path and in the simulator.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

namespace heddle::fwd {

// Numbered as HashSpec::function (artifact.h).
enum class HashFunction : uint8_t { kUnknown = 0, kCrc32 = 1, kCrc32c = 2, kCrc16 = 3 };

inline constexpr size_t kFlowKey4Bytes = 13;
inline constexpr size_t kFlowKey6Bytes = 37;
inline constexpr size_t kFlowKeySportOffset4 = 9;
inline constexpr size_t kFlowKeySportOffset6 = 33;

// src/dst in host order.
std::array<uint8_t, kFlowKey4Bytes> FlowKey4(uint32_t src, uint32_t dst, uint8_t proto,
                                             uint16_t sport, uint16_t dport);
// src16/dst16 in network order.
std::array<uint8_t, kFlowKey6Bytes> FlowKey6(const uint8_t* src16, const uint8_t* dst16,
                                             uint8_t proto, uint16_t sport, uint16_t dport);

// The raw CRCs, register preset to `init`, with the final XOR described above.
uint32_t Crc32(uint32_t init, const uint8_t* data, size_t len);
uint32_t Crc32c(uint32_t init, const uint8_t* data, size_t len);
uint16_t Crc16Arc(uint16_t init, const uint8_t* data, size_t len);

// H = hash(seed, key). kUnknown returns 0: nothing can be predicted about an unknown hash.
uint32_t SwitchHash(HashFunction function, uint32_t seed, std::span<const uint8_t> key);

// The member (0..n-1) of an n-way ECMP set the switch picks: (H >> bit_offset) % n. n == 0 or
// kUnknown give 0; a bit_offset of 32 or more shifts everything out (member 0).
uint32_t EcmpMember(HashFunction function, uint32_t seed, uint8_t bit_offset,
                    std::span<const uint8_t> key, uint32_t n);

// Bits of H that depend on the source port alone: A(s) = H(0, key with only sport = s) ^
// H(0, zero key). For any seed and addresses, H(seed, key with sport s) = H(seed, key with sport
// 0) ^ A(s). Key length: 13 or 37 (the same A for both).
uint32_t SportContribution(HashFunction function, uint16_t sport);

}  // namespace heddle::fwd

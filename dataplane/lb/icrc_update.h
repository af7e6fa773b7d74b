// File: dataplane/lb/icrc_update.h
//
// Incremental RoCEv2 ICRC update for a changed 16-bit field (the UDP source port, the usual ECMP
// entropy, is covered by the ICRC). Instead of re-running CRC-32 over the whole packet, the change
// of the CRC is computed from the changed bits alone (docs/pin.md §5):
//
//   CRC-32 is affine over GF(2): for two messages of equal length, crc(M ^ D) = crc(M) ^ raw(D),
//   where raw() is the CRC register with a zero initial value and no final inversion. D is zero
//   but for the 16-bit difference δ = old ^ new at the field, followed by `tail` bytes up to the
//   ICRC, and leading zero bytes leave a zero register unchanged, so
//
//     raw(D) = raw(δ ‖ 0^tail) = raw(δ) · x^(8·tail)  mod P(x)
//
//   raw(δ) is two steps of the byte table; x^(8·tail) mod P comes from two 256-entry tables
//   (tail = 256·hi + lo: x^(8·256·hi) · x^(8·lo)); the products are carry-less multiplies
//   (PCLMULQDQ when the CPU has it) reduced with four byte-table steps. A few nanoseconds,
//   whatever the packet length, against ~1 ns per byte for a full recompute.
//
//   uint32_t delta = heddle::lb::IcrcDelta16(old_sport, new_sport, tail);
//   stored_icrc ^= delta;  // the ICRC as it sits on the wire, read little-endian
//
// The update preserves whatever the old ICRC was: a packet that arrived corrupt stays detectably
// corrupt (nothing here launders a bad ICRC into a good one). No allocation; the tables are
// constant data built at compile time.
#pragma once

#include <array>
#include <bit>
#include <cstdint>

namespace heddle::lb {

// The ICRC change (as a value XORed into the little-endian ICRC word) when a 16-bit big-endian
// field covered by the ICRC changes from `old_value` to `new_value`, with `tail_len` bytes between
// the end of the field and the start of the ICRC. Any tail_len < 65536 (every frame heddle sees).
uint32_t IcrcDelta16(uint16_t old_value, uint16_t new_value, uint32_t tail_len) noexcept;

// A memo of IcrcDelta16() for one thread (a worker owns one). The delta depends only on d =
// old ^ new and the tail length, and is linear in d (CRC-32 is linear over GF(2)): for one tail,
// delta(d) = lo[d & 0xff] ^ hi[d >> 8]. The cache keeps those two 256-entry tables for one hot
// tail length (traffic repeats frame sizes: every 60-byte SEND, every MTU-sized middle packet),
// so most packets take two loads and no compare of d. Other tails go to a 4 KiB two-way memo of
// (d, tail) -> delta, and to IcrcDelta16() when that misses. Every kWindow calls with another
// tail, the most frequent of them (a majority vote) becomes the hot tail if it came a quarter
// more often than the hot tail in the meantime: a tail that takes over the traffic gets the table
// within a window, two of similar frequency do not swap it back and forth (a rebuild costs a few
// thousand instructions). Not thread-safe.
class IcrcDeltaCache {
 public:
  uint32_t Delta16(uint16_t old_value, uint16_t new_value, uint32_t tail_len) noexcept {
    const uint32_t d = static_cast<uint32_t>(old_value ^ new_value);
    if (tail_len == hot_tail_) [[likely]] {
      ++hot_hits_;
      return hot_lo_[d & 0xff] ^ hot_hi_[d >> 8];
    }
    return Cold(d, tail_len);
  }
  // Delta16() of the field as its two bytes sit in the frame, each value loaded as a native 16-bit
  // word (std::memcpy): on a little-endian host the bytes of d come swapped, so the two tables
  // swap places and neither value is byte-swapped.
  uint32_t Delta16Wire(uint16_t old_wire, uint16_t new_wire, uint32_t tail_len) noexcept {
    if constexpr (std::endian::native == std::endian::little) {
      const uint32_t w = static_cast<uint32_t>(old_wire ^ new_wire);
      if (tail_len == hot_tail_) [[likely]] {
        ++hot_hits_;
        return hot_lo_[w >> 8] ^ hot_hi_[w & 0xff];
      }
      return Cold(__builtin_bswap16(static_cast<uint16_t>(w)), tail_len);
    } else {
      return Delta16(old_wire, new_wire, tail_len);
    }
  }
  // Delta16Wire() with the distance from the field's first byte to the ICRC, `span` = tail_len +
  // 2 (for the UDP source port: icrc_off - l4_off), 2 <= span < 65538: a frame's two offsets
  // give it with one subtraction.
  uint32_t DeltaSpanWire(uint16_t old_wire, uint16_t new_wire, uint32_t span) noexcept {
    if constexpr (std::endian::native == std::endian::little) {
      if (span == hot_span_) [[likely]] {
        ++hot_hits_;
        const uint32_t w = static_cast<uint32_t>(old_wire ^ new_wire);
        return hot_lo_[w >> 8] ^ hot_hi_[w & 0xff];
      }
    }
    return Delta16Wire(old_wire, new_wire, span - 2);
  }

 private:
  static constexpr int kBits = 8;
  static constexpr uint32_t kNoTail = 0xffffffffu;           // no candidate
  static constexpr uint64_t kNoHotTail = uint64_t{1} << 32;  // no hot table yet: equals no tail
  static constexpr uint32_t kWindow = 256;                   // cold calls between two votes
  // Not the hot tail: the memo, and the vote for the next hot tail.
  uint32_t Cold(uint32_t d, uint32_t tail_len) noexcept;
  void Adopt(uint32_t tail_len) noexcept;

  struct Way {
    uint32_t key = 0;  // 0: empty
    uint32_t delta = 0;
  };
  struct Set {
    Way way[2];
  };
  uint64_t hot_tail_ = kNoHotTail;
  uint64_t hot_span_ = kNoHotTail + 2;  // hot_tail_ + 2 (DeltaSpanWire())
  uint64_t hot_hits_ = 0;               // in this window
  // The most frequent cold tail of this window (Boyer-Moore majority vote) and its net count.
  uint32_t candidate_ = kNoTail;
  uint32_t votes_ = 0;
  uint32_t cold_calls_ = 0;  // in this window
  std::array<uint32_t, 256> hot_lo_{};
  std::array<uint32_t, 256> hot_hi_{};
  std::array<Set, 1u << kBits> sets_{};
};

namespace icrc_internal {
// The product a(x)·b(x) mod P(x) of two CRC-32 register values, in zlib's reflected convention
// (bit 31 is the x^0 coefficient), as zlib's multmodp(). The PCLMULQDQ version and the portable
// bit loop; MulMod() picks the first when the CPU supports it. Exposed for tests.
uint32_t MulModPortable(uint32_t a, uint32_t b) noexcept;
uint32_t MulModClmul(uint32_t a, uint32_t b) noexcept;  // only call if HaveClmul()
bool HaveClmul() noexcept;
uint32_t MulMod(uint32_t a, uint32_t b) noexcept;
// x^(8·n) mod P(x): the register change over n zero bytes. Any n < 65536.
uint32_t XPow8n(uint32_t n) noexcept;
}  // namespace icrc_internal

}  // namespace heddle::lb

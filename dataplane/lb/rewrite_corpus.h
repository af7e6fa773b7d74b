// File: dataplane/lb/rewrite_corpus.h
//
// Test support for the entropy rewrite: random RoCEv2 frames covering what the rewrite must
// handle (IPv4 with and without options, IPv6, 0-2 VLAN tags, every opcode class, payloads from
// empty to 4 KiB, zero and non-zero UDP checksums), and a UDP checksum computed from scratch to
// check the incremental one against. Used by rewrite_test and by lb_rewrite_corpus, which writes
// rewritten frames for the scapy cross-check (tests/data/scapy_check_lb_rewrite.py).
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "dataplane/pkt/parse.h"

namespace heddle::lb {

struct RandomFrame {
  std::vector<uint8_t> bytes;
  bool udp_checksum = false;  // the frame carries a real (non-zero) UDP checksum
};

// A random, valid RoCEv2 frame (correct ICRC, IPv4 checksum and, if udp_checksum, UDP checksum).
RandomFrame MakeRandomFrame(std::mt19937_64& rng);

// The UDP checksum of a parsed IPv4/IPv6 frame computed over the pseudo-header and the whole
// datagram, with the checksum field taken as zero (0 is returned as 0xFFFF, RFC 768).
uint16_t UdpChecksum(const uint8_t* frame, const pkt::PacketDesc& desc);

}  // namespace heddle::lb

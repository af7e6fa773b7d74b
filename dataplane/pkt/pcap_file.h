// File: dataplane/pkt/pcap_file.h
//
// Classic libpcap files (not pcapng): the format net_pcap, tcpdump, tshark and scapy all read.
// The writer emits DLT_EN10MB with nanosecond (default) or microsecond timestamps; the reader
// accepts both precisions in either byte order and rejects anything inconsistent (bad magic, a
// link type other than Ethernet, a record longer than the snap length or the file) with a Status
// that names the record, instead of crashing or returning garbage.
//
//   HEDDLE_ASSIGN_OR_RETURN(auto w, heddle::pkt::PcapWriter::Open("out.pcap"));
//   HEDDLE_RETURN_IF_ERROR(w.Write(ts_ns, frame));
//   HEDDLE_RETURN_IF_ERROR(w.Close());
//   HEDDLE_ASSIGN_OR_RETURN(std::vector<heddle::pkt::PcapRecord> recs,
//                           heddle::pkt::ReadPcapFile("out.pcap"));
#pragma once

#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace heddle::pkt {

inline constexpr uint32_t kPcapMagicMicro = 0xa1b2c3d4;
inline constexpr uint32_t kPcapMagicNano = 0xa1b23c4d;
inline constexpr uint32_t kDltEn10mb = 1;

enum class PcapPrecision { kMicro, kNano };

struct PcapRecord {
  uint64_t timestamp_ns = 0;
  uint32_t orig_len = 0;      // length on the wire; >= data.size()
  std::vector<uint8_t> data;  // the captured bytes
};

class PcapWriter {
 public:
  static absl::StatusOr<PcapWriter> Open(const std::string& path,
                                         PcapPrecision precision = PcapPrecision::kNano,
                                         uint32_t snaplen = 65535);
  PcapWriter(PcapWriter&& other) noexcept;
  PcapWriter& operator=(PcapWriter&& other) noexcept;
  PcapWriter(const PcapWriter&) = delete;
  PcapWriter& operator=(const PcapWriter&) = delete;
  ~PcapWriter();  // closes, ignoring errors: call Close() to see them

  // Frames longer than the snap length are cut to it (orig_len keeps the full length).
  absl::Status Write(uint64_t timestamp_ns, std::span<const uint8_t> frame);
  absl::Status Close();

 private:
  PcapWriter(std::FILE* f, std::string path, PcapPrecision precision, uint32_t snaplen)
      : file_(f), path_(std::move(path)), precision_(precision), snaplen_(snaplen) {}
  std::FILE* file_ = nullptr;
  std::string path_;
  PcapPrecision precision_ = PcapPrecision::kNano;
  uint32_t snaplen_ = 65535;
};

// Parses a whole pcap image held in memory.
absl::StatusOr<std::vector<PcapRecord>> ParsePcap(std::span<const uint8_t> bytes);
// Reads and parses a pcap file.
absl::StatusOr<std::vector<PcapRecord>> ReadPcapFile(const std::string& path);
// Writes `records` to `path` in one go.
absl::Status WritePcapFile(const std::string& path, const std::vector<PcapRecord>& records,
                           PcapPrecision precision = PcapPrecision::kNano);

}  // namespace heddle::pkt

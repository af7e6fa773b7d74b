// File: dataplane/pkt/pcap_file.cc
#include "dataplane/pkt/pcap_file.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace heddle::pkt {
namespace {

constexpr size_t kFileHeaderLen = 24;
constexpr size_t kRecordHeaderLen = 16;
// No Ethernet frame heddle handles comes near this; a larger record length is corruption.
constexpr uint32_t kMaxRecordLen = 256 * 1024;

void PutLe32(uint8_t* p, uint32_t x) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(x >> (8 * i));
}
void PutLe16(uint8_t* p, uint16_t x) {
  p[0] = static_cast<uint8_t>(x);
  p[1] = static_cast<uint8_t>(x >> 8);
}

uint32_t Get32(const uint8_t* p, bool swapped) {
  const uint32_t le = static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 |
                      static_cast<uint32_t>(p[2]) << 16 | static_cast<uint32_t>(p[3]) << 24;
  return swapped ? __builtin_bswap32(le) : le;
}

}  // namespace

absl::StatusOr<PcapWriter> PcapWriter::Open(const std::string& path, PcapPrecision precision,
                                            uint32_t snaplen) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) {
    return absl::InternalError(
        absl::StrCat("pcap ", path, ": cannot create: ", std::strerror(errno)));
  }
  uint8_t h[kFileHeaderLen] = {};
  PutLe32(h, precision == PcapPrecision::kNano ? kPcapMagicNano : kPcapMagicMicro);
  PutLe16(h + 4, 2);  // version 2.4
  PutLe16(h + 6, 4);
  PutLe32(h + 16, snaplen);
  PutLe32(h + 20, kDltEn10mb);
  if (std::fwrite(h, 1, sizeof(h), f) != sizeof(h)) {
    std::fclose(f);
    return absl::InternalError(absl::StrCat("pcap ", path, ": cannot write the file header"));
  }
  return PcapWriter(f, path, precision, snaplen);
}

PcapWriter::PcapWriter(PcapWriter&& other) noexcept
    : file_(std::exchange(other.file_, nullptr)),
      path_(std::move(other.path_)),
      precision_(other.precision_),
      snaplen_(other.snaplen_) {}

PcapWriter& PcapWriter::operator=(PcapWriter&& other) noexcept {
  if (this != &other) {
    if (file_ != nullptr) std::fclose(file_);
    file_ = std::exchange(other.file_, nullptr);
    path_ = std::move(other.path_);
    precision_ = other.precision_;
    snaplen_ = other.snaplen_;
  }
  return *this;
}

PcapWriter::~PcapWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

absl::Status PcapWriter::Write(uint64_t timestamp_ns, std::span<const uint8_t> frame) {
  if (file_ == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat("pcap ", path_, ": already closed"));
  }
  const uint32_t caplen = static_cast<uint32_t>(std::min<size_t>(frame.size(), snaplen_));
  uint8_t h[kRecordHeaderLen];
  const uint64_t sec = timestamp_ns / 1000000000u;
  const uint64_t frac = timestamp_ns % 1000000000u;
  PutLe32(h, static_cast<uint32_t>(sec));
  PutLe32(h + 4, static_cast<uint32_t>(precision_ == PcapPrecision::kNano ? frac : frac / 1000));
  PutLe32(h + 8, caplen);
  PutLe32(h + 12, static_cast<uint32_t>(frame.size()));
  if (std::fwrite(h, 1, sizeof(h), file_) != sizeof(h) ||
      std::fwrite(frame.data(), 1, caplen, file_) != caplen) {
    return absl::InternalError(
        absl::StrCat("pcap ", path_, ": write failed: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::Status PcapWriter::Close() {
  if (file_ == nullptr) return absl::OkStatus();
  const int rc = std::fclose(std::exchange(file_, nullptr));
  if (rc != 0) {
    return absl::InternalError(
        absl::StrCat("pcap ", path_, ": close failed: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<PcapRecord>> ParsePcap(std::span<const uint8_t> b) {
  if (b.size() < kFileHeaderLen) {
    return absl::InvalidArgumentError(
        absl::StrFormat("pcap: %u bytes is shorter than the 24-byte file header", b.size()));
  }
  const uint32_t magic = Get32(b.data(), false);
  bool swapped = false;
  bool nano = false;
  if (magic == kPcapMagicMicro || magic == kPcapMagicNano) {
    nano = magic == kPcapMagicNano;
  } else if (magic == __builtin_bswap32(kPcapMagicMicro) ||
             magic == __builtin_bswap32(kPcapMagicNano)) {
    swapped = true;
    nano = magic == __builtin_bswap32(kPcapMagicNano);
  } else {
    return absl::InvalidArgumentError(absl::StrFormat(
        "pcap: bad magic 0x%08x (not a classic pcap file; pcapng is not supported, convert it "
        "with `editcap -F pcap`)",
        magic));
  }
  const uint32_t linktype = Get32(b.data() + 20, swapped) & 0x0fffffff;
  if (linktype != kDltEn10mb) {
    return absl::InvalidArgumentError(
        absl::StrFormat("pcap: link type %u is not Ethernet (DLT_EN10MB = 1)", linktype));
  }
  std::vector<PcapRecord> out;
  size_t off = kFileHeaderLen;
  while (off < b.size()) {
    const size_t index = out.size();
    if (b.size() - off < kRecordHeaderLen) {
      return absl::InvalidArgumentError(
          absl::StrFormat("pcap: record %u: header cut short (%u of 16 bytes at offset %u)", index,
                          b.size() - off, off));
    }
    const uint8_t* h = b.data() + off;
    const uint32_t sec = Get32(h, swapped);
    const uint32_t frac = Get32(h + 4, swapped);
    const uint32_t caplen = Get32(h + 8, swapped);
    const uint32_t origlen = Get32(h + 12, swapped);
    if (frac >= (nano ? 1000000000u : 1000000u)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("pcap: record %u: sub-second timestamp %u out of range", index, frac));
    }
    if (caplen > kMaxRecordLen) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "pcap: record %u: captured length %u exceeds %u bytes", index, caplen, kMaxRecordLen));
    }
    if (caplen > origlen) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "pcap: record %u: captured length %u > original length %u", index, caplen, origlen));
    }
    off += kRecordHeaderLen;
    if (b.size() - off < caplen) {
      return absl::InvalidArgumentError(
          absl::StrFormat("pcap: record %u: %u bytes announced, %u left in the file", index, caplen,
                          b.size() - off));
    }
    PcapRecord r;
    r.timestamp_ns = static_cast<uint64_t>(sec) * 1000000000u +
                     (nano ? frac : static_cast<uint64_t>(frac) * 1000);
    r.orig_len = origlen;
    r.data.assign(b.data() + off, b.data() + off + caplen);
    out.push_back(std::move(r));
    off += caplen;
  }
  return out;
}

absl::StatusOr<std::vector<PcapRecord>> ReadPcapFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat("pcap ", path, ": cannot open: ", std::strerror(errno)));
  }
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                             std::istreambuf_iterator<char>());
  if (in.bad()) return absl::InternalError(absl::StrCat("pcap ", path, ": read failed"));
  absl::StatusOr<std::vector<PcapRecord>> recs = ParsePcap(bytes);
  if (!recs.ok()) {
    return absl::Status(recs.status().code(), absl::StrCat(path, ": ", recs.status().message()));
  }
  return recs;
}

absl::Status WritePcapFile(const std::string& path, const std::vector<PcapRecord>& records,
                           PcapPrecision precision) {
  absl::StatusOr<PcapWriter> w = PcapWriter::Open(path, precision);
  if (!w.ok()) return w.status();
  for (const PcapRecord& r : records) {
    absl::Status s = w->Write(r.timestamp_ns, r.data);
    if (!s.ok()) return s;
  }
  return w->Close();
}

}  // namespace heddle::pkt

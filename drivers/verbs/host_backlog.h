// File: drivers/verbs/host_backlog.h
//
// Host backlog as STORM looks it up on the wire (docs/storm.md §4). The verbs shim
// (drivers/verbs/shim) publishes, per local QP, how many bytes the application posted and how many
// completed, and the peer the QP is connected to: the remote GID (ah_attr.grh.dgid) and the remote
// QPN (dest_qp_num). A request packet from this host carries exactly that peer — its destination
// IP is the peer's address (RoCEv2: the GID; IPv4 as ::ffff:a.b.c.d) and its BTH destination QPN
// is the peer's QPN — but never the local QPN. So heddled keys host backlog by
// (peer address, destination QPN), the request-direction QpKey's (dst_ip, dest_qpn).
//
//   // Control thread, every few milliseconds:
//   HostBacklogReader reader("/dev/shm");          // once; keeps the tables mapped
//   HostBacklogRead r = reader.Read();
//   for (const std::string& e : r.errors) ...;     // log when they change
//   Publish(std::move(r.index));                   // RCU: swap a pointer, free after a grace
//   period
//
//   // Worker, per request packet (no allocation, no lock):
//   const uint64_t backlog = index->LookupBytes(key.dst_ip, key.dest_qpn);   // 0: unknown
//   // Worker, per response packet (ACK/NAK, READ response): the request's destination QPN.
//   const uint32_t dest_qpn = index->PairedDestQpn(key.src_ip, key.dest_qpn);  // kNoPair: unknown
//
// HostBacklogReader is not thread-safe: one control thread calls Read(). Each Read() re-lists the
// directory, maps tables that appeared (or replaced an old file of the same name, e.g. a reused
// pid), unmaps those that vanished, and re-reads only the slots ever claimed in each table (the
// list is rebuilt when a table's claim counter moves), so a steady host costs a directory listing,
// two syscalls per table and two cache lines per QP. A HostBacklogIndex is immutable once built
// and may be read by any number of threads.
//
// The pair index. Responses travel the other way: an ACK, NAK or READ response towards this host
// comes from the peer (source IP = the peer's address) and carries the *local* QPN in BTH, never
// the peer's. The same shim slot gives the local QPN beside (dgid, dest_qpn), so the index also
// maps (peer address, local QPN) -> destination QPN, which names the request-direction QpKey of
// the response's QP (docs/storm.md §6.1). A (peer, local QPN) claimed by two QPs with different
// destination QPNs (two RDMA devices handing out the same QPN to QPs connected to one peer, or a
// stale slot) cannot be told apart without the local address, which the shim does not record: such
// a key is ambiguous and not paired (counted in ambiguous_pairs()).
//
// Which QPs are indexed: live QPs (not destroyed) whose peer GID and QPN are both known — on RoCE
// every RC/UC QP once it reached RTR. UD QPs (the remote QPN is per WR), QPs not yet connected and
// InfiniBand QPs without a GRH count in qps_without_peer. Tables of processes that no longer exist
// are skipped by default: their QPs are gone, and a crashed process's frozen backlog would be
// charged to whichever new connection reuses that peer QPN. When heddled runs in another pid
// namespace than the applications every writer looks dead; set include_dead_writers there.
#pragma once

#include <sys/types.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "drivers/verbs/shim/backlog_table.h"

namespace heddle::verbs {

// Immutable, built off the hot path: (peer address as 16 bytes, IPv4 v4-mapped; destination QPN)
// -> backlog. Open addressing with linear probing over a flat power-of-two array at most half
// full, hashed with a per-process random seed (the keys come from other users' files; a seed they
// cannot predict keeps them from building long probe chains the workers would walk).
class HostBacklogIndex {
 public:
  // Local QPN of an entry whose local QP is not known (e.g. built by hand): not paired.
  static constexpr uint32_t kNoLocalQpn = 0xffffffff;
  // PairedDestQpn() of a response that names no single known QP.
  static constexpr uint32_t kNoPair = 0xffffffff;

  struct Entry {
    std::array<uint8_t, 16> peer_ip{};
    uint32_t dest_qpn = 0;  // 24 bits; higher bits are ignored
    uint64_t backlog_bytes = 0;
    uint64_t backlog_wqes = 0;
    uint32_t local_qpn = kNoLocalQpn;  // the local QP's number (24 bits), what responses carry
  };

  // Duplicate keys (two local QPs claiming the same peer: a stale one, or a QP the shim did not see
  // destroyed) are summed, saturating.
  static std::unique_ptr<HostBacklogIndex> Build(absl::Span<const Entry> entries);

  // Hot path: no allocation, no locks. 0 when the key is unknown.
  uint64_t LookupBytes(const std::array<uint8_t, 16>& peer_ip, uint32_t dest_qpn) const {
    const Entry* e = Find(peer_ip, dest_qpn);
    return e != nullptr ? e->backlog_bytes : 0;
  }
  // The (summed) entry of the key, or nullptr: tells "no backlog" from "unknown QP".
  const Entry* Find(const std::array<uint8_t, 16>& peer_ip, uint32_t dest_qpn) const;

  // The request-direction destination QPN of the QP that a response from `peer_ip` to local QP
  // `local_qpn` (its BTH destination QPN) belongs to; kNoPair when no indexed QP has that peer
  // and local QPN, or two disagree. Hot path: no allocation, no locks; one probe sequence in an
  // array at most half full.
  uint32_t PairedDestQpn(const std::array<uint8_t, 16>& peer_ip, uint32_t local_qpn) const;

  size_t size() const { return size_; }                        // distinct (peer, dest QPN) keys
  size_t pairs() const { return pairs_; }                      // distinct (peer, local QPN) keys
  size_t ambiguous_pairs() const { return ambiguous_pairs_; }  // of which not paired

 private:
  struct Slot {
    Entry entry;
    uint32_t used = 0;
  };
  // (peer, local QPN) -> destination QPN (kNoPair once ambiguous).
  struct PairSlot {
    std::array<uint8_t, 16> peer_ip{};
    uint32_t local_qpn = 0;
    uint32_t dest_qpn = 0;
    uint32_t used = 0;
  };
  HostBacklogIndex() = default;
  size_t Home(const std::array<uint8_t, 16>& peer_ip, uint32_t qpn, uint64_t salt) const;

  std::unique_ptr<Slot[]> slots_;
  std::unique_ptr<PairSlot[]> pair_slots_;
  size_t mask_ = 0;
  size_t pair_mask_ = 0;
  uint64_t seed_ = 0;
  size_t size_ = 0;
  size_t pairs_ = 0;
  size_t ambiguous_pairs_ = 0;
};

struct HostBacklogOptions {
  // Index the tables of processes that no longer exist (see the file comment).
  bool include_dead_writers = false;
  // Connected QPs indexed per Read(), over all tables; beyond it the rest are dropped and an error
  // says so. Bounds the index (a 56-byte slot and a 28-byte pair slot per QP, each array at most
  // half full) against hostile tables.
  size_t max_qps = size_t{1} << 20;
};

struct HostBacklogRead {
  std::unique_ptr<HostBacklogIndex> index;  // never null; empty when nothing was read
  size_t tables = 0;                        // tables whose QPs were read
  size_t qps = 0;                           // live QPs in those tables
  size_t qps_without_peer = 0;              // of which not indexed: no peer GID and QPN known
  size_t dead_writer_tables = 0;            // valid tables whose writer process is gone
  uint64_t overflow_events = 0;  // summed over the tables read: events the shims could not
                                 // account because their table was full
  // One line per refused table, naming the file and why ("backlog table /dev/shm/heddle-verbs-12:
  // layout version 1, ..."), plus one if the directory cannot be listed or max_qps was exceeded.
  std::vector<std::string> errors;
};

// Reads the shim tables ("heddle-verbs-<pid>") in one directory, repeatedly (see the file comment).
// Tables are mapped read-only; bad ones (wrong magic, version or sizes, truncated, not a regular
// file, header pid not the file's) are reported, never crash the reader, and are not re-validated
// until the file changes.
class HostBacklogReader {
 public:
  explicit HostBacklogReader(std::string dir, HostBacklogOptions options = {});
  HostBacklogReader(HostBacklogReader&&) noexcept;
  HostBacklogReader& operator=(HostBacklogReader&&) noexcept;
  ~HostBacklogReader();

  HostBacklogRead Read();

  const std::string& dir() const { return dir_; }
  size_t mapped_tables() const { return tables_.size(); }

 private:
  struct Table {
    explicit Table(shim::BacklogReader r) : reader(std::move(r)) {}
    shim::BacklogReader reader;
    std::vector<uint32_t> claimed;  // non-empty slots as of claims_seen
    uint64_t claims_seen = 0;
    bool claimed_valid = false;
  };
  // A refused file, not re-validated while it stays the same.
  struct Refusal {
    dev_t dev = 0;
    ino_t ino = 0;
    off_t size = 0;
    int64_t mtime_ns = 0;
    std::string why;
  };

  std::string dir_;
  HostBacklogOptions options_;
  std::map<std::string, Table> tables_;     // by file name
  std::map<std::string, Refusal> refused_;  // by file name
  std::vector<HostBacklogIndex::Entry> entries_;
};

// One-shot HostBacklogReader(dir).Read(): maps, reads and unmaps every table.
HostBacklogRead ReadHostBacklog(const std::string& dir);

}  // namespace heddle::verbs

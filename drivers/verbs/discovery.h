// File: drivers/verbs/discovery.h
//
// RDMA device discovery through rdma-core's libibverbs: which RDMA devices the host has, each
// port's state, active MTU and link layer, and the non-empty GID table entries with their type
// (RoCEv2 / RoCEv1 / IB). heddled uses it at start-up and `heddlectl` shows it; it never runs on
// the per-packet path.
//
//   HEDDLE_ASSIGN_OR_RETURN(std::vector<verbs::RdmaDevice> devs, verbs::DiscoverRdmaDevices());
//   for (const auto& d : devs) {
//     if (!d.note.empty()) HEDDLE_LOG(kWarning, "rdma %s: %s", d.name.c_str(), d.note.c_str());
//     for (const auto& p : d.ports) ... p.state == "active", p.active_mtu_bytes, p.gids ...
//   }
//
// Failure model. A host without RDMA devices (or without the kernel's RDMA subsystem) is normal:
// OK with an empty list. A device that cannot be opened or queried stays in the list with `note`
// saying why and what to check; a port whose query fails gets state "error: <reason>"; neither
// fails the whole discovery. Only a failure to enumerate devices at all is an error Status.
//
// Testing without hardware. QueryDevice() takes an already opened ibv_context and issues the real
// rdma-core calls on it: ibv_query_device_ex() and ibv_query_port() are inline wrappers that
// dispatch through the public provider slots of struct verbs_context (query_device_ex,
// query_port), so a test can hand in a fake context whose slots point at fake functions. The one
// exception is the GID table: rdma-core reads it with a uverbs ioctl on context->cmd_fd (through
// libibverbs' private per-context data) and falls back to sysfs under
// /sys/class/infiniband/<dev>/, neither of which a fake context can serve. That single call is the
// `QueryGidFn` seam below; production code passes QueryGidWithRdmaCore (ibv_query_gid_ex).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

struct ibv_context;
struct ibv_gid_entry;

namespace heddle::verbs {

struct RdmaGid {
  uint32_t index = 0;
  std::string gid;   // IPv6 text: "fe80::268a:7ff:fe55:4660", "::ffff:192.168.1.10"
  std::string type;  // "RoCEv2", "RoCEv1" or "IB"; empty if unknown
};

struct RdmaPort {
  uint32_t port_num = 0;  // 1-based, as in verbs
  // "active", "down", "init", "armed", "active-defer", "nop", or "error: <why>" if the port
  // query failed (then the other fields are empty).
  std::string state;
  uint32_t active_mtu_bytes = 0;  // 256..4096; 0 if unknown
  std::string link_layer;         // "Ethernet", "InfiniBand" or "unspecified"
  std::vector<RdmaGid> gids;      // non-empty entries only, by index
};

struct RdmaDevice {
  std::string name;       // kernel device name, "mlx5_0"
  std::string node_guid;  // "b859:9f03:00d4:3c2e", as ibv_devinfo prints it
  std::string fw_ver;
  std::vector<RdmaPort> ports;
  // Empty when everything was read; otherwise what failed and what to check ("cannot open: ...").
  std::string note;
};

// Enumerates every RDMA device with ibv_get_device_list() and queries each one.
absl::StatusOr<std::vector<RdmaDevice>> DiscoverRdmaDevices();

// Reads GID table entry `gid_index` of port `port_num`. Returns 0, ENODATA for an empty entry, or
// another errno value.
using QueryGidFn = int (*)(ibv_context* ctx, uint32_t port_num, uint32_t gid_index,
                           ibv_gid_entry* entry);

// The production QueryGidFn: rdma-core's ibv_query_gid_ex().
int QueryGidWithRdmaCore(ibv_context* ctx, uint32_t port_num, uint32_t gid_index,
                         ibv_gid_entry* entry);

// Queries one opened device: attributes, every port, every port's GID table. Never fails as a
// whole; problems are reported in RdmaDevice::note and RdmaPort::state. `ctx` stays open.
RdmaDevice QueryDevice(ibv_context* ctx, QueryGidFn query_gid = &QueryGidWithRdmaCore);

// Text form of a raw 16-byte GID (RFC 5952 IPv6 text; IPv4-mapped GIDs print as ::ffff:a.b.c.d).
std::string FormatGid(const uint8_t (&raw)[16]);

}  // namespace heddle::verbs

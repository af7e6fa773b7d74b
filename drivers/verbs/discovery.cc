// File: drivers/verbs/discovery.cc
//
// DiscoverRdmaDevices() and QueryDevice() on top of libibverbs (rdma-core 44).
#include "drivers/verbs/discovery.h"

#include <arpa/inet.h>
#include <endian.h>
#include <infiniband/verbs.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace heddle::verbs {
namespace {

// verbs calls return a positive errno, or -1 with errno set (older providers).
std::string VerbsError(int rc) {
  int err = rc > 0 ? rc : errno;
  if (err == 0) return absl::StrCat("error code ", rc);
  return std::strerror(err);
}

void AddNote(RdmaDevice& d, const std::string& note) {
  if (!d.note.empty()) d.note += "; ";
  d.note += note;
}

std::string PortStateName(ibv_port_state s) {
  switch (s) {
    case IBV_PORT_NOP:
      return "nop";
    case IBV_PORT_DOWN:
      return "down";
    case IBV_PORT_INIT:
      return "init";
    case IBV_PORT_ARMED:
      return "armed";
    case IBV_PORT_ACTIVE:
      return "active";
    case IBV_PORT_ACTIVE_DEFER:
      return "active-defer";
  }
  return absl::StrCat("unknown(", static_cast<int>(s), ")");
}

uint32_t MtuBytes(ibv_mtu mtu) {
  if (mtu < IBV_MTU_256 || mtu > IBV_MTU_4096) return 0;
  return 256u << (static_cast<int>(mtu) - IBV_MTU_256);
}

std::string LinkLayerName(uint8_t ll) {
  switch (ll) {
    case IBV_LINK_LAYER_ETHERNET:
      return "Ethernet";
    case IBV_LINK_LAYER_INFINIBAND:
      return "InfiniBand";
    default:
      return "unspecified";
  }
}

std::string GidTypeName(uint32_t t) {
  switch (t) {
    case IBV_GID_TYPE_IB:
      return "IB";
    case IBV_GID_TYPE_ROCE_V1:
      return "RoCEv1";
    case IBV_GID_TYPE_ROCE_V2:
      return "RoCEv2";
    default:
      return "";
  }
}

std::string FormatNodeGuid(__be64 guid) {
  uint64_t g = be64toh(guid);
  return absl::StrFormat("%04x:%04x:%04x:%04x", (g >> 48) & 0xffff, (g >> 32) & 0xffff,
                         (g >> 16) & 0xffff, g & 0xffff);
}

bool IsZeroGid(const ibv_gid& gid) {
  for (uint8_t b : gid.raw) {
    if (b != 0) return false;
  }
  return true;
}

// Reads the port's GID table; failures other than empty entries go to the device note, once per
// port, so a table of 256 unreadable entries does not produce 256 notes.
void QueryGids(ibv_context* ctx, QueryGidFn query_gid, const ibv_port_attr& attr, RdmaPort& port,
               RdmaDevice& dev) {
  int failures = 0;
  std::string first_error;
  uint32_t first_index = 0;
  for (int i = 0; i < attr.gid_tbl_len; ++i) {
    ibv_gid_entry entry{};
    int rc = query_gid(ctx, port.port_num, static_cast<uint32_t>(i), &entry);
    if (rc == ENODATA) continue;  // empty entry
    if (rc != 0) {
      if (failures++ == 0) {
        first_error = VerbsError(rc);
        first_index = static_cast<uint32_t>(i);
      }
      continue;
    }
    if (IsZeroGid(entry.gid)) continue;
    port.gids.push_back(
        RdmaGid{static_cast<uint32_t>(i), FormatGid(entry.gid.raw), GidTypeName(entry.gid_type)});
  }
  if (failures > 0) {
    AddNote(dev, absl::StrCat("port ", port.port_num, ": ", failures, " GID entr",
                              failures == 1 ? "y" : "ies", " unreadable (first: index ",
                              first_index, ": ", first_error, ")"));
  }
}

struct DeviceListDeleter {
  void operator()(ibv_device** list) const { ibv_free_device_list(list); }
};

}  // namespace

std::string FormatGid(const uint8_t (&raw)[16]) {
  char text[INET6_ADDRSTRLEN] = {};
  if (inet_ntop(AF_INET6, raw, text, sizeof(text)) == nullptr) return "";
  return text;
}

int QueryGidWithRdmaCore(ibv_context* ctx, uint32_t port_num, uint32_t gid_index,
                         ibv_gid_entry* entry) {
  return ibv_query_gid_ex(ctx, port_num, gid_index, entry, /*flags=*/0);
}

RdmaDevice QueryDevice(ibv_context* ctx, QueryGidFn query_gid) {
  RdmaDevice dev;
  if (ctx == nullptr) {
    dev.note = "no device context";
    return dev;
  }
  if (ctx->device != nullptr) dev.name = ibv_get_device_name(ctx->device);

  ibv_device_attr_ex attr{};
  int rc = ibv_query_device_ex(ctx, /*input=*/nullptr, &attr);
  if (rc != 0) {
    AddNote(dev, absl::StrCat("ibv_query_device_ex failed: ", VerbsError(rc),
                              "; check `ibv_devinfo -d ", dev.name, "` and the kernel log"));
    return dev;
  }
  dev.node_guid = FormatNodeGuid(attr.orig_attr.node_guid);
  dev.fw_ver.assign(attr.orig_attr.fw_ver,
                    strnlen(attr.orig_attr.fw_ver, sizeof(attr.orig_attr.fw_ver)));

  for (uint32_t p = 1; p <= attr.orig_attr.phys_port_cnt; ++p) {
    RdmaPort port;
    port.port_num = p;
    ibv_port_attr pattr{};
    rc = ibv_query_port(ctx, static_cast<uint8_t>(p), &pattr);
    if (rc != 0) {
      port.state = absl::StrCat("error: ibv_query_port failed: ", VerbsError(rc));
      dev.ports.push_back(std::move(port));
      continue;
    }
    port.state = PortStateName(pattr.state);
    port.active_mtu_bytes = MtuBytes(pattr.active_mtu);
    port.link_layer = LinkLayerName(pattr.link_layer);
    QueryGids(ctx, query_gid, pattr, port, dev);
    dev.ports.push_back(std::move(port));
  }
  return dev;
}

absl::StatusOr<std::vector<RdmaDevice>> DiscoverRdmaDevices() {
  std::vector<RdmaDevice> out;
  errno = 0;
  int num = 0;
  std::unique_ptr<ibv_device*[], DeviceListDeleter> list(ibv_get_device_list(&num));
  if (list == nullptr) {
    const int err = errno;
    // ENOSYS: the kernel has no RDMA subsystem (no /sys/class/infiniband_verbs). Same as no device.
    if (err == ENOSYS || err == ENOENT || err == 0) return out;
    return absl::UnavailableError(absl::StrCat(
        "rdma: cannot list RDMA devices: ibv_get_device_list failed: ", std::strerror(err),
        "; check that the ib_uverbs kernel module is loaded and /dev/infiniband is "
        "readable"));
  }
  for (int i = 0; i < num && list[i] != nullptr; ++i) {
    ibv_device* d = list[i];
    const char* name = ibv_get_device_name(d);
    errno = 0;
    ibv_context* ctx = ibv_open_device(d);
    if (ctx == nullptr) {
      RdmaDevice dev;
      dev.name = name != nullptr ? name : "";
      const int err = errno;
      dev.note = absl::StrCat("cannot open: ", err != 0 ? std::strerror(err) : "unknown error",
                              "; check read/write access to /dev/infiniband/uverbs* (e.g. the "
                              "rdma group) and RLIMIT_MEMLOCK");
      out.push_back(std::move(dev));
      continue;
    }
    RdmaDevice dev = QueryDevice(ctx);
    if (dev.name.empty() && name != nullptr) dev.name = name;
    if (ibv_close_device(ctx) != 0) AddNote(dev, "ibv_close_device failed");
    out.push_back(std::move(dev));
  }
  return out;
}

}  // namespace heddle::verbs

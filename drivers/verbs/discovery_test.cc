// File: drivers/verbs/discovery_test.cc
//
// QueryDevice() against a fake ibv_context: the real rdma-core inline wrappers
// (ibv_query_device_ex, ibv_query_port) dispatch through the provider slots of struct
// verbs_context, which point at the fakes below. Only the GID read goes through the QueryGidFn
// seam (rdma-core serves it from a kernel ioctl or sysfs). DiscoverRdmaDevices() runs for real.
#include "drivers/verbs/discovery.h"

#include <arpa/inet.h>
#include <endian.h>
#include <infiniband/verbs.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <string>
#include <type_traits>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace heddle::verbs {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::StartsWith;

struct FakePort {
  int query_rc = 0;  // what the provider's query_port returns
  ibv_port_attr attr{};
  std::map<uint32_t, ibv_gid_entry> gids;  // entries absent here read as ENODATA
  std::map<uint32_t, int> gid_errors;      // entries whose read fails with this errno
};

struct FakeDevice {
  int query_rc = 0;
  std::string fw_ver = "22.35.1012";
  uint64_t node_guid = 0xb8599f0300d43c2eULL;  // host order; the fake hands it out big-endian
  std::vector<FakePort> ports;
  // What the fakes saw, to prove the calls reached them.
  int device_queries = 0;
  std::vector<int> port_queries;
  std::vector<std::pair<uint32_t, uint32_t>> gid_queries;
};

// The provider context. verbs_context must come first: rdma-core finds it from the ibv_context
// by offset (verbs_get_ctx), and the fakes find FakeContext from the verbs_context the same way.
struct FakeContext {
  verbs_context vctx;
  FakeDevice* fake;
};
static_assert(std::is_standard_layout_v<FakeContext>);

FakeDevice* FakeOf(ibv_context* ctx) {
  return reinterpret_cast<FakeContext*>(verbs_get_ctx(ctx))->fake;
}

// Must not return EOPNOTSUPP/ENOSYS: ibv_query_device_ex() would then fall back to the legacy
// ibv_query_device(), which needs libibverbs' private per-context data that a fake lacks.
int FakeQueryDeviceEx(ibv_context* ctx, const ibv_query_device_ex_input* input,
                      ibv_device_attr_ex* attr, size_t attr_size) {
  FakeDevice* f = FakeOf(ctx);
  ++f->device_queries;
  if (f->query_rc != 0) return f->query_rc;
  std::memset(attr, 0, attr_size);
  std::strncpy(attr->orig_attr.fw_ver, f->fw_ver.c_str(), sizeof(attr->orig_attr.fw_ver) - 1);
  attr->orig_attr.node_guid = htobe64(f->node_guid);
  attr->orig_attr.phys_port_cnt = static_cast<uint8_t>(f->ports.size());
  return 0;
}

int FakeQueryPort(ibv_context* ctx, uint8_t port_num, ibv_port_attr* attr, size_t attr_len) {
  FakeDevice* f = FakeOf(ctx);
  f->port_queries.push_back(port_num);
  if (port_num < 1 || port_num > f->ports.size()) return EINVAL;
  const FakePort& p = f->ports[port_num - 1];
  if (p.query_rc != 0) return p.query_rc;
  std::memcpy(attr, &p.attr, std::min(attr_len, sizeof(p.attr)));
  return 0;
}

int FakeQueryGid(ibv_context* ctx, uint32_t port_num, uint32_t gid_index, ibv_gid_entry* entry) {
  FakeDevice* f = FakeOf(ctx);
  f->gid_queries.emplace_back(port_num, gid_index);
  const FakePort& p = f->ports.at(port_num - 1);
  if (auto e = p.gid_errors.find(gid_index); e != p.gid_errors.end()) return e->second;
  auto g = p.gids.find(gid_index);
  if (g == p.gids.end()) return ENODATA;
  *entry = g->second;
  return 0;
}

ibv_gid_entry GidEntry(const char* ipv6_text, uint32_t index, uint32_t port, ibv_gid_type type) {
  ibv_gid_entry e{};
  EXPECT_EQ(inet_pton(AF_INET6, ipv6_text, e.gid.raw), 1) << ipv6_text;
  e.gid_index = index;
  e.port_num = port;
  e.gid_type = type;
  return e;
}

// Owns the fake device and a context wired to the fakes.
class FakeVerbs {
 public:
  explicit FakeVerbs(FakeDevice device) : fake_(std::move(device)) {
    std::memset(&ctx_, 0, sizeof(ctx_));
    std::memset(&device_, 0, sizeof(device_));
    std::strncpy(device_.name, "fake_mlx5_0", sizeof(device_.name) - 1);
    ctx_.fake = &fake_;
    ctx_.vctx.sz = sizeof(verbs_context);
    ctx_.vctx.query_device_ex = &FakeQueryDeviceEx;
    ctx_.vctx.query_port = &FakeQueryPort;
    ctx_.vctx.context.abi_compat = __VERBS_ABI_IS_EXTENDED;
    ctx_.vctx.context.device = &device_;
    ctx_.vctx.context.cmd_fd = -1;
  }
  ibv_context* context() { return &ctx_.vctx.context; }
  FakeDevice& fake() { return fake_; }

 private:
  FakeDevice fake_;
  ibv_device device_;
  FakeContext ctx_;
};

FakePort ActiveRoceV2Port() {
  FakePort p;
  p.attr.state = IBV_PORT_ACTIVE;
  p.attr.active_mtu = IBV_MTU_4096;
  p.attr.max_mtu = IBV_MTU_4096;
  p.attr.link_layer = IBV_LINK_LAYER_ETHERNET;
  p.attr.gid_tbl_len = 6;
  p.gids[0] = GidEntry("fe80::268a:7ff:fe55:4660", 0, 1, IBV_GID_TYPE_ROCE_V2);
  // 1 is empty (ENODATA); 2 reads OK but all-zero, as the sysfs fallback returns for holes.
  p.gids[2] = GidEntry("::", 2, 1, IBV_GID_TYPE_ROCE_V2);
  p.gids[3] = GidEntry("::ffff:192.168.1.10", 3, 1, IBV_GID_TYPE_ROCE_V2);
  // 4, 5 empty.
  return p;
}

FakePort DownPort() {
  FakePort p;
  p.attr.state = IBV_PORT_DOWN;
  p.attr.active_mtu = IBV_MTU_1024;
  p.attr.link_layer = IBV_LINK_LAYER_ETHERNET;
  p.attr.gid_tbl_len = 2;
  return p;
}

TEST(QueryDeviceTest, ReportsEveryFieldOfATwoPortDevice) {
  FakeDevice d;
  d.ports = {ActiveRoceV2Port(), DownPort()};
  FakeVerbs v(d);

  RdmaDevice dev = QueryDevice(v.context(), &FakeQueryGid);

  EXPECT_EQ(dev.name, "fake_mlx5_0");
  EXPECT_EQ(dev.node_guid, "b859:9f03:00d4:3c2e");
  EXPECT_EQ(dev.fw_ver, "22.35.1012");
  EXPECT_THAT(dev.note, IsEmpty());
  ASSERT_EQ(dev.ports.size(), 2u);

  const RdmaPort& p1 = dev.ports[0];
  EXPECT_EQ(p1.port_num, 1u);
  EXPECT_EQ(p1.state, "active");
  EXPECT_EQ(p1.active_mtu_bytes, 4096u);
  EXPECT_EQ(p1.link_layer, "Ethernet");
  ASSERT_EQ(p1.gids.size(), 2u);
  EXPECT_EQ(p1.gids[0].index, 0u);
  EXPECT_EQ(p1.gids[0].gid, "fe80::268a:7ff:fe55:4660");
  EXPECT_EQ(p1.gids[0].type, "RoCEv2");
  EXPECT_EQ(p1.gids[1].index, 3u);
  EXPECT_EQ(p1.gids[1].gid, "::ffff:192.168.1.10");
  EXPECT_EQ(p1.gids[1].type, "RoCEv2");

  const RdmaPort& p2 = dev.ports[1];
  EXPECT_EQ(p2.port_num, 2u);
  EXPECT_EQ(p2.state, "down");
  EXPECT_EQ(p2.active_mtu_bytes, 1024u);
  EXPECT_EQ(p2.link_layer, "Ethernet");
  EXPECT_THAT(p2.gids, IsEmpty());

  // The real rdma-core wrappers reached the provider slots, once per port, and every GID table
  // entry was read exactly once.
  EXPECT_EQ(v.fake().device_queries, 1);
  EXPECT_EQ(v.fake().port_queries, (std::vector<int>{1, 2}));
  std::vector<std::pair<uint32_t, uint32_t>> want_gids;
  for (uint32_t i = 0; i < 6; ++i) want_gids.emplace_back(1, i);
  for (uint32_t i = 0; i < 2; ++i) want_gids.emplace_back(2, i);
  EXPECT_EQ(v.fake().gid_queries, want_gids);
}

TEST(QueryDeviceTest, FailedPortQueryIsReportedOnThatPortOnly) {
  FakeDevice d;
  d.ports = {DownPort(), ActiveRoceV2Port()};
  d.ports[0].query_rc = EIO;
  FakeVerbs v(d);

  RdmaDevice dev = QueryDevice(v.context(), &FakeQueryGid);

  ASSERT_EQ(dev.ports.size(), 2u);
  EXPECT_EQ(dev.ports[0].port_num, 1u);
  EXPECT_THAT(dev.ports[0].state, StartsWith("error: "));
  EXPECT_THAT(dev.ports[0].state, HasSubstr(std::strerror(EIO)));
  EXPECT_EQ(dev.ports[0].active_mtu_bytes, 0u);
  EXPECT_THAT(dev.ports[0].gids, IsEmpty());
  EXPECT_EQ(dev.ports[1].state, "active");
  EXPECT_EQ(dev.ports[1].active_mtu_bytes, 4096u);
  EXPECT_EQ(dev.ports[1].gids.size(), 2u);
  EXPECT_EQ(dev.node_guid, "b859:9f03:00d4:3c2e");
  // No GID read was attempted on the failed port.
  for (const auto& [port, index] : v.fake().gid_queries) EXPECT_EQ(port, 2u);
}

TEST(QueryDeviceTest, FailedDeviceQueryBecomesANote) {
  FakeDevice d;
  d.query_rc = EIO;
  d.ports = {ActiveRoceV2Port()};
  FakeVerbs v(d);

  RdmaDevice dev = QueryDevice(v.context(), &FakeQueryGid);

  EXPECT_EQ(dev.name, "fake_mlx5_0");
  EXPECT_THAT(dev.note, HasSubstr("ibv_query_device_ex failed"));
  EXPECT_THAT(dev.note, HasSubstr(std::strerror(EIO)));
  EXPECT_THAT(dev.ports, IsEmpty());
  EXPECT_TRUE(v.fake().port_queries.empty());
}

TEST(QueryDeviceTest, UnreadableGidsAreSummarizedOncePerPort) {
  FakeDevice d;
  d.ports = {ActiveRoceV2Port()};
  d.ports[0].gid_errors[4] = EPERM;
  d.ports[0].gid_errors[5] = EIO;
  FakeVerbs v(d);

  RdmaDevice dev = QueryDevice(v.context(), &FakeQueryGid);

  ASSERT_EQ(dev.ports.size(), 1u);
  EXPECT_EQ(dev.ports[0].gids.size(), 2u);  // the readable ones are still there
  EXPECT_THAT(dev.note, HasSubstr("port 1: 2 GID entries unreadable"));
  EXPECT_THAT(dev.note, HasSubstr("index 4"));
  EXPECT_THAT(dev.note, HasSubstr(std::strerror(EPERM)));
}

TEST(QueryDeviceTest, InfiniBandPortAndGidTypes) {
  FakeDevice d;
  FakePort ib;
  ib.attr.state = IBV_PORT_INIT;
  ib.attr.active_mtu = IBV_MTU_2048;
  ib.attr.link_layer = IBV_LINK_LAYER_INFINIBAND;
  ib.attr.gid_tbl_len = 1;
  ib.gids[0] = GidEntry("fe80::b859:9f03:d4:3c2e", 0, 1, IBV_GID_TYPE_IB);
  FakePort v1;
  v1.attr.state = IBV_PORT_ARMED;
  v1.attr.active_mtu = static_cast<ibv_mtu>(0);  // not reported
  v1.attr.link_layer = IBV_LINK_LAYER_UNSPECIFIED;
  v1.attr.gid_tbl_len = 1;
  v1.gids[0] = GidEntry("fe80::1", 0, 2, IBV_GID_TYPE_ROCE_V1);
  d.ports = {ib, v1};
  FakeVerbs v(d);

  RdmaDevice dev = QueryDevice(v.context(), &FakeQueryGid);

  ASSERT_EQ(dev.ports.size(), 2u);
  EXPECT_EQ(dev.ports[0].state, "init");
  EXPECT_EQ(dev.ports[0].active_mtu_bytes, 2048u);
  EXPECT_EQ(dev.ports[0].link_layer, "InfiniBand");
  ASSERT_EQ(dev.ports[0].gids.size(), 1u);
  EXPECT_EQ(dev.ports[0].gids[0].type, "IB");
  EXPECT_EQ(dev.ports[0].gids[0].gid, "fe80::b859:9f03:d4:3c2e");
  EXPECT_EQ(dev.ports[1].state, "armed");
  EXPECT_EQ(dev.ports[1].active_mtu_bytes, 0u);
  EXPECT_EQ(dev.ports[1].link_layer, "unspecified");
  ASSERT_EQ(dev.ports[1].gids.size(), 1u);
  EXPECT_EQ(dev.ports[1].gids[0].type, "RoCEv1");
}

TEST(QueryDeviceTest, NullContextIsANoteNotACrash) {
  RdmaDevice dev = QueryDevice(nullptr, &FakeQueryGid);
  EXPECT_FALSE(dev.note.empty());
  EXPECT_TRUE(dev.ports.empty());
}

TEST(FormatGidTest, Ipv6AndIpv4MappedText) {
  auto format = [](std::initializer_list<uint8_t> bytes) {
    uint8_t raw[16] = {};
    std::copy(bytes.begin(), bytes.end(), raw);
    return FormatGid(raw);
  };
  EXPECT_EQ(format({0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x26, 0x8a, 0x07, 0xff, 0xfe, 0x55, 0x46, 0x60}),
            "fe80::268a:7ff:fe55:4660");
  EXPECT_EQ(format({0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 1}), "::ffff:10.0.0.1");
  EXPECT_EQ(format({0x20, 0x01, 0x0d, 0xb8, 0, 1, 0, 2, 0, 3, 0, 4, 0, 5, 0, 6}),
            "2001:db8:1:2:3:4:5:6");
  EXPECT_EQ(format({}), "::");
  // Round trip against the system parser for a range of patterns.
  for (const char* text : {"fe80::1", "::ffff:192.168.1.10", "fd00:0:0:1::a", "2001:db8::"}) {
    uint8_t raw[16];
    ASSERT_EQ(inet_pton(AF_INET6, text, raw), 1);
    EXPECT_EQ(FormatGid(raw), text);
  }
}

// Runs the real enumeration. This machine may or may not have RDMA devices, so check that the
// answer is consistent with what libibverbs itself reports rather than a fixed count.
TEST(DiscoverRdmaDevicesTest, AgreesWithTheDeviceList) {
  absl::StatusOr<std::vector<RdmaDevice>> devs = DiscoverRdmaDevices();
  ASSERT_TRUE(devs.ok()) << devs.status();

  int num = 0;
  ibv_device** list = ibv_get_device_list(&num);
  std::vector<std::string> names;
  if (list != nullptr) {
    for (int i = 0; i < num; ++i) names.push_back(ibv_get_device_name(list[i]));
    ibv_free_device_list(list);
  }
  ASSERT_EQ(devs->size(), names.size());
  for (size_t i = 0; i < devs->size(); ++i) {
    const RdmaDevice& d = (*devs)[i];
    EXPECT_EQ(d.name, names[i]);
    if (!d.note.empty() && d.ports.empty()) continue;  // could not open or query
    EXPECT_FALSE(d.node_guid.empty()) << d.name;
    for (size_t p = 0; p < d.ports.size(); ++p) {
      EXPECT_EQ(d.ports[p].port_num, p + 1) << d.name;
      EXPECT_FALSE(d.ports[p].state.empty()) << d.name;
      for (const RdmaGid& g : d.ports[p].gids) EXPECT_NE(g.gid, "::") << d.name;
    }
  }
}

}  // namespace
}  // namespace heddle::verbs

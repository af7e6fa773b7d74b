#include "tools/heddled/daemon.h"

#include <rte_eal.h>
#include <rte_ethdev.h>
#include <rte_launch.h>
#include <rte_lcore.h>
#include <rte_mempool.h>
#include <signal.h>
#include <unistd.h>

#include <bitset>
#include <mutex>
#include <optional>
#include <span>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "common/version.h"
#include "control/api/daemon_view.h"
#include "control/api/server.h"
#include "control/metrics/metrics.h"
#include "dataplane/pipeline/pin_stage.h"
#include "dataplane/pipeline/stages.h"
#include "dataplane/pipeline/stats.h"
#include "dataplane/pipeline/storm_stage.h"
#include "dataplane/pipeline/worker.h"
#include "dataplane/storm/tc_map.h"
#include "drivers/dpdk/eal.h"
#include "drivers/dpdk/port.h"
#include "drivers/verbs/discovery.h"
#include "tools/heddled/fwd_service.h"
#include "tools/heddled/lb_service.h"
#include "tools/heddled/storm_service.h"

namespace heddle::heddled {

using pipeline::kMaxPorts;
using pipeline::kNoEgress;

void BlockTerminationSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

// Resolves each port's egress: the configured peer, else host i <-> uplink i (mod count).
absl::StatusOr<std::array<uint16_t, kMaxPorts>> ResolvePeers(const config::Config& c) {
  std::array<uint16_t, kMaxPorts> peer;
  peer.fill(kNoEgress);
  std::vector<uint16_t> hosts, uplinks;
  for (size_t i = 0; i < c.ports.size(); ++i) {
    (c.ports[i].role == config::PortRole::kHost ? hosts : uplinks).push_back(i);
  }
  for (size_t i = 0; i < c.ports.size(); ++i) {
    const auto& p = c.ports[i];
    if (!p.peer.empty()) {
      for (size_t j = 0; j < c.ports.size(); ++j) {
        if (c.ports[j].name == p.peer) peer[i] = j;
      }
      if (peer[i] == kNoEgress) {
        return absl::InvalidArgumentError(
            absl::StrCat("ports[", i, "].peer: \"", p.peer, "\" names no port"));
      }
      continue;
    }
    const auto& own = p.role == config::PortRole::kHost ? hosts : uplinks;
    const auto& other = p.role == config::PortRole::kHost ? uplinks : hosts;
    if (other.empty()) continue;
    size_t rank = std::find(own.begin(), own.end(), i) - own.begin();
    peer[i] = other[rank % other.size()];
  }
  return peer;
}

struct Daemon::Impl : public api::DaemonView {
  config::Config cfg;
  std::string config_path;
  std::chrono::steady_clock::time_point started_at = std::chrono::steady_clock::now();

  bool eal_up = false;
  std::vector<dpdk::Port> ports;
  rte_mempool* pool = nullptr;
  std::array<uint16_t, kMaxPorts> peer{};
  std::unique_ptr<pipeline::DataplaneStats> stats;
  // Declared before the workers: their storm-tag stages read its StormControl until destroyed.
  std::unique_ptr<StormService> storm_svc;
  // How each port serves the STORM levels (storm.egress), fixed when the ports are configured.
  std::vector<api::StormEgressPortView> storm_egress;
  // Declared before the workers: their pin-select stages read its LbControl until destroyed.
  std::unique_ptr<LbService> lb_svc;
  // Publishes through lb_svc's LbControl (declared after it, destroyed first).
  std::unique_ptr<FwdService> fwd_svc;
  std::mutex cfg_mu;  // cfg.storm and cfg.lb change at run time (set storm, set lb)
  std::vector<std::unique_ptr<pipeline::Worker>> workers;
  std::atomic<bool> stop_workers{false};
  bool workers_running = false;
  std::unique_ptr<metrics::MetricsServer> metrics;
  std::unique_ptr<api::ApiServer> api;
  bool stopped = false;

  // --- DaemonView (gRPC threads) ---
  api::StatusView GetStatus() override {
    api::StatusView s;
    s.version = kVersion;
    s.uptime_seconds = std::chrono::duration_cast<std::chrono::seconds>(
                           std::chrono::steady_clock::now() - started_at)
                           .count();
    s.pid = static_cast<uint32_t>(getpid());
    s.config_path = config_path;
    s.lcores = GetLcores();
    s.ports = GetPorts();
    s.metrics_url = metrics ? metrics->url() : "";
    return s;
  }

  std::vector<api::PortView> GetPorts() override {
    std::vector<api::PortView> out;
    for (size_t i = 0; i < ports.size(); ++i) {
      const dpdk::Port& p = ports[i];
      const config::PortConfig& pc = cfg.ports[i];
      api::PortView v;
      v.name = pc.name;
      v.role = config::PortRoleName(pc.role);
      v.device = pc.vdev.empty() ? pc.pci : pc.vdev;
      v.driver = p.driver();
      v.port_id = p.port_id();
      dpdk::LinkInfo l = p.Link();
      v.link_up = l.up;
      v.speed_mbps = l.speed_mbps;
      v.full_duplex = l.full_duplex;
      v.mac = p.MacAddress();
      v.rx_queues = static_cast<uint32_t>(p.rx_queue_ids().size());
      v.tx_queues = p.tx_queues_configured();
      uint16_t mtu = 0;
      if (rte_eth_dev_get_mtu(p.port_id(), &mtu) == 0) v.mtu = mtu;
      v.peer = peer[i] == kNoEgress ? "" : cfg.ports[peer[i]].name;
      out.push_back(std::move(v));
    }
    return out;
  }

  std::vector<api::PortStatsView> GetPortStats() override {
    pipeline::StatsSnapshot snap = stats->Snapshot();
    std::vector<api::PortStatsView> out;
    for (size_t i = 0; i < ports.size(); ++i) {
      api::PortStatsView v;
      v.name = cfg.ports[i].name;
      const pipeline::PortSnapshot& ps = snap.ports[i];
      v.rx_packets = ps.rx_packets;
      v.rx_bytes = ps.rx_bytes;
      v.tx_packets = ps.tx_packets;
      v.tx_bytes = ps.tx_bytes;
      dpdk::HwStats hw = ports[i].Stats();
      v.hw_rx_missed = hw.rx_missed;
      v.hw_rx_errors = hw.rx_errors;
      v.hw_tx_errors = hw.tx_errors;
      v.hw_rx_nombuf = hw.rx_nombuf;
      for (int c = 1; c < pipeline::kNumRoceClasses; ++c) {  // skip "none"
        v.roce_by_class.emplace_back(pkt::RoceClassName(static_cast<pkt::RoceClass>(c)),
                                     ps.roce_rx_packets[c]);
      }
      out.push_back(std::move(v));
    }
    return out;
  }

  std::vector<api::LcoreView> GetLcores() override {
    std::vector<api::LcoreView> out;
    out.push_back({cfg.main_lcore, "main", 0, 0});
    pipeline::StatsSnapshot snap = stats->Snapshot();
    for (const auto& l : snap.lcores)
      out.push_back({l.lcore_id, "worker", l.busy_loops, l.idle_loops});
    return out;
  }

  std::vector<api::DropView> GetDrops() override {
    pipeline::StatsSnapshot snap = stats->Snapshot();
    std::vector<api::DropView> out;
    for (int r = 0; r < pipeline::kNumDropReasons; ++r) {
      auto reason = static_cast<pipeline::DropReason>(r);
      out.push_back({pipeline::DropReasonName(reason), pipeline::DropReasonDescription(reason),
                     snap.drops[r]});
    }
    return out;
  }

  std::string GetConfigYaml() override {
    std::lock_guard<std::mutex> g(cfg_mu);
    return config::ToYaml(cfg);
  }

  absl::StatusOr<api::StormView> GetStorm() override {
    if (!storm_svc) return StormOff();
    return WithEgress(storm_svc->View(stats->Snapshot()));
  }

  absl::StatusOr<api::StormView> WithEgress(absl::StatusOr<api::StormView> v) const {
    if (v.ok()) v->egress_ports = storm_egress;
    return v;
  }

  absl::StatusOr<std::vector<api::QpView>> ListQps(uint32_t top, const std::string& sort) override {
    if (!storm_svc) return StormOff();
    return storm_svc->ListQps(top, sort);
  }

  absl::StatusOr<api::StormView> SetStorm(const api::StormUpdate& u) override {
    if (!storm_svc) return StormOff();
    {
      std::lock_guard<std::mutex> g(cfg_mu);
      config::StormConfig next = cfg.storm;
      HEDDLE_RETURN_IF_ERROR(storm_svc->Apply(u, &next));
      cfg.storm = std::move(next);
    }
    return WithEgress(storm_svc->View(stats->Snapshot()));
  }

  absl::StatusOr<api::LbView> GetLb() override {
    if (!lb_svc) return LbOff();
    return lb_svc->View();
  }

  absl::StatusOr<api::LbView> SetLb(const api::LbUpdate& u) override {
    // With fwd alone pin-select runs ecmp without PIN; changing that needs lb.enabled.
    if (!lb_svc || !cfg.lb.enabled) return LbOff();
    {
      std::lock_guard<std::mutex> g(cfg_mu);
      config::LbConfig next = cfg.lb;
      HEDDLE_RETURN_IF_ERROR(lb_svc->Apply(u, &next));
      cfg.lb = std::move(next);
    }
    return lb_svc->View();
  }

  absl::StatusOr<api::ArtifactView> InstallArtifact(const api::ArtifactInstall& in) override {
    if (!fwd_svc) return FwdOff();
    return fwd_svc->Install(std::span<const uint8_t>(
                                reinterpret_cast<const uint8_t*>(in.bytes.data()), in.bytes.size()),
                            in.source, in.dry_run);
  }

  absl::StatusOr<api::ArtifactStateView> GetArtifact() override {
    if (!fwd_svc) return FwdOff();
    return fwd_svc->State();
  }

  absl::StatusOr<api::ArtifactDiffView> DiffArtifact(const std::string& bytes) override {
    if (!fwd_svc) return FwdOff();
    return fwd_svc->Diff(
        std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
  }

  absl::StatusOr<api::ArtifactView> RollbackArtifact(std::optional<uint64_t> to) override {
    if (!fwd_svc) return FwdOff();
    return fwd_svc->Rollback(to);
  }

  static absl::Status FwdOff() {
    return absl::FailedPreconditionError(
        "fwd is not configured; add a fwd section (fwd: { node: \"host[N]\" }) naming this host "
        "and restart heddled");
  }

  static absl::Status LbOff() {
    return absl::FailedPreconditionError(
        "lb is not enabled; set lb.enabled: true in the configuration and restart heddled");
  }

  static absl::Status StormOff() {
    return absl::FailedPreconditionError(
        "storm is not enabled; set storm.enabled: true in the configuration and restart heddled");
  }

  api::RdmaView GetRdma() override {
    api::RdmaView v;
    auto devs = verbs::DiscoverRdmaDevices();
    if (!devs.ok()) {
      v.note = absl::StrCat("RDMA discovery failed: ", devs.status().message());
      return v;
    }
    for (const auto& d : *devs) {
      api::RdmaDeviceView dv{d.name, d.node_guid, d.fw_ver, {}};
      for (const auto& p : d.ports) {
        api::RdmaPortView pv{p.port_num, p.state, p.active_mtu_bytes, p.link_layer, {}};
        for (const auto& g : p.gids) pv.gids.emplace_back(g.index, g.gid);
        dv.ports.push_back(std::move(pv));
      }
      v.devices.push_back(std::move(dv));
    }
    if (v.devices.empty()) v.note = "no RDMA device found";
    return v;
  }

  // --- lifecycle (main thread) ---
  absl::Status Start();
  void Stop();
};

absl::Status Daemon::Impl::Start() {
  HEDDLE_ASSIGN_OR_RETURN(peer, ResolvePeers(cfg));

  dpdk::EalParams ep;
  ep.main_lcore = cfg.main_lcore;
  ep.worker_lcores = cfg.worker_lcores;
  ep.no_huge = cfg.no_huge;
  ep.memory_mb = cfg.memory_mb;
  ep.file_prefix = cfg.file_prefix;
  ep.log_level = cfg.log_level;
  ep.extra = cfg.eal_args;
  for (const auto& p : cfg.ports) {
    if (!p.vdev.empty()) {
      ep.vdevs.push_back(p.vdev);
    } else {
      ep.pci.push_back(p.devargs.empty() ? p.pci : absl::StrCat(p.pci, ",", p.devargs));
    }
  }
  HEDDLE_RETURN_IF_ERROR(dpdk::InitEal(ep));
  eal_up = true;

  for (unsigned w : cfg.worker_lcores) {
    if (!rte_lcore_is_enabled(w)) {
      return absl::InvalidArgumentError(absl::StrCat("lcores.workers: lcore ", w,
                                                     " is not enabled; pick cores this machine "
                                                     "has (see `lscpu`)"));
    }
  }

  const uint16_t num_workers = static_cast<uint16_t>(cfg.worker_lcores.size());
  // STORM levels on DCB TX queues (storm.egress dcb/auto): uplink ports only, the direction
  // storm-tag levels. The level -> TC map is fixed here, for the life of the ports.
  std::optional<storm::TcMap> tc_map;
  if (cfg.storm.enabled && cfg.storm.egress != config::StormEgress::kSoftware) {
    HEDDLE_ASSIGN_OR_RETURN(tc_map, storm::MapLevelsToTcs(cfg.storm.levels));
  }
  int socket = -1;
  for (const auto& pc : cfg.ports) {
    dpdk::PortParams pp;
    pp.name = pc.name;
    pp.is_vdev = !pc.vdev.empty();
    pp.device = pp.is_vdev ? pc.vdev : pc.pci;
    pp.rx_queues = pc.rx_queues;
    pp.tx_queues = num_workers;
    pp.rx_desc = pc.rx_desc;
    pp.tx_desc = pc.tx_desc;
    pp.mtu = pc.mtu;
    pp.promiscuous = pc.promiscuous;
    if (tc_map && pc.role == config::PortRole::kUplink) {
      pp.tx_dcb = cfg.storm.egress == config::StormEgress::kDcb ? dpdk::PortParams::TxDcb::kRequire
                                                                : dpdk::PortParams::TxDcb::kPrefer;
      pp.dcb_tcs = dpdk::DcbTcs{
          .nb_tcs = tc_map->nb_tcs, .level_tc = tc_map->level_tc, .prio_tc = tc_map->prio_tc};
      pp.dcb_pfc = cfg.storm.dcb_pfc;
    }
    HEDDLE_ASSIGN_OR_RETURN(dpdk::Port port, dpdk::Port::Find(pp));
    if (socket < 0) socket = port.socket_id();
    ports.push_back(std::move(port));
  }
  HEDDLE_ASSIGN_OR_RETURN(pool, dpdk::CreateMbufPool("heddle_mbufs", cfg.mbufs, cfg.mbuf_cache,
                                                     cfg.mbuf_data_room, socket < 0 ? 0 : socket));
  for (auto& p : ports) HEDDLE_RETURN_IF_ERROR(p.Configure(pool));
  if (cfg.storm.enabled) {
    for (size_t pi = 0; pi < ports.size(); ++pi) {
      const dpdk::Port& p = ports[pi];
      api::StormEgressPortView e;
      e.port = cfg.ports[pi].name;
      e.configured = cfg.ports[pi].role == config::PortRole::kUplink
                         ? config::StormEgressName(cfg.storm.egress)
                         : "software";
      e.mode = p.dcb() ? "dcb" : "software";
      e.fallback = p.dcb_fallback();
      if (const std::optional<dpdk::DcbQueues>& q = p.dcb()) {
        e.traffic_classes = q->nb_tcs;
        for (int l = 0; l < cfg.storm.levels.levels; ++l) {
          const int tc = q->level_tc[l];
          e.levels.push_back(
              {static_cast<uint32_t>(l), static_cast<uint32_t>(tc), q->tc_base[tc], num_workers});
        }
        std::string shares;
        for (int t = 0; t < q->nb_tcs; ++t) absl::StrAppend(&shares, t ? "/" : "", q->tc_bws[t]);
        // The PMD's ETS shares: the TCs are served by weight, not in strict priority, unless the
        // operator changes that (docs/storm.md §6.7).
        HEDDLE_LOG(kInfo, "port %s: STORM levels on DCB TX queues, %s; TX shares %s %%%s",
                   e.port.c_str(), dpdk::DescribeDcbQueues(*q, cfg.storm.levels.levels).c_str(),
                   shares.c_str(), cfg.storm.dcb_pfc ? ", PFC on" : "");
      }
      storm_egress.push_back(std::move(e));
    }
  }

  stats =
      std::make_unique<pipeline::DataplaneStats>(static_cast<int>(ports.size()), cfg.worker_lcores);

  for (auto& p : ports) {
    HEDDLE_RETURN_IF_ERROR(p.Start());
    HEDDLE_LOG(kInfo, "port %s: %s (port %u, driver %s, %u rx queue(s)%s, %u tx queue(s)%s) -> %s",
               p.params().name.c_str(), p.params().device.c_str(), p.port_id(), p.driver().c_str(),
               static_cast<unsigned>(p.rx_queue_ids().size()), p.rss_enabled() ? " with RSS" : "",
               p.tx_queues_configured(),
               p.tx_multi_seg() ? "" : ", single-segment TX: chained mbufs dropped",
               peer[&p - &ports[0]] == kNoEgress ? "(no egress)"
                                                 : cfg.ports[peer[&p - &ports[0]]].name.c_str());
  }

  // STORM tags the request direction: packets arriving on host ports.
  std::bitset<pipeline::kMaxPorts> host_ports;
  for (size_t pi = 0; pi < cfg.ports.size(); ++pi) {
    if (cfg.ports[pi].role == config::PortRole::kHost) host_ports.set(pi);
  }
  if (cfg.storm.enabled) {
    HEDDLE_LOG(kInfo,
               "storm-tag: %d levels, %s, %s cutoffs, QP table of %u entries per worker (%u MiB)",
               cfg.storm.levels.levels,
               cfg.storm.levels.mode == storm::Mode::kPerPacket ? "per-packet" : "per-message",
               cfg.storm.auto_cutoffs ? "auto" : "static", config::QpCapacityPerWorker(cfg),
               static_cast<unsigned>((uint64_t{config::QpCapacityPerWorker(cfg)} * 66) >> 20));
    storm_svc = std::make_unique<StormService>(cfg.storm, num_workers);
  }
  if (cfg.lb.enabled || cfg.fwd.enabled) {
    // The artifact of fwd.artifact is checked and built before the workers exist: it is the
    // table they start with. A bad one stops the start-up, naming what is wrong.
    std::optional<FwdService::Prepared> artifact;
    std::optional<FwdService::Options> fwd_options;
    if (cfg.fwd.enabled) {
      HEDDLE_ASSIGN_OR_RETURN(fwd_options, FwdService::OptionsFromConfig(cfg));
      if (!cfg.fwd.artifact.empty()) {
        const std::string path = ResolveArtifactPath(config_path, cfg.fwd.artifact);
        absl::StatusOr<std::vector<uint8_t>> bytes = fwd::ReadArtifactBytes(path);
        if (!bytes.ok()) {
          return absl::InvalidArgumentError(
              absl::StrCat("fwd.artifact: ", bytes.status().message()));
        }
        FwdService probe(*fwd_options);
        absl::StatusOr<FwdService::Prepared> p = probe.Prepare(*bytes, path);
        if (!p.ok()) {
          return absl::InvalidArgumentError(absl::StrCat("fwd.artifact: ", p.status().message()));
        }
        artifact = *std::move(p);
      }
    }
    HEDDLE_ASSIGN_OR_RETURN(
        lb_svc, LbService::Create(cfg, num_workers, artifact ? artifact->table : nullptr));
    if (fwd_options) {
      pipeline::LbControl* lb_ctl = lb_svc->control();
      fwd_options->publish = [lb_ctl](std::shared_ptr<const lb::PathTable> t) {
        return lb_ctl->SetPathTable(std::move(t));
      };
      fwd_svc = std::make_unique<FwdService>(*std::move(fwd_options));
      if (artifact) fwd_svc->Adopt(*std::move(artifact));
    }
    const lb::LbConfig l = LbService::EffectiveParams(cfg);
    const std::shared_ptr<const lb::PathTable> table = lb_svc->control()->current().table;
    HEDDLE_LOG(kInfo,
               "pin-select: %s%s, threshold %llu bytes%s, %zu path set(s) from %s, flow table of "
               "%u entries per worker (%u MiB), feedback join %s",
               lb::BalancerKindName(l.balancer), l.pin ? " under PIN" : " (pin off)",
               static_cast<unsigned long long>(lb::EffectiveThreshold(l)),
               l.threshold_bytes == 0 ? " (one BDP)" : "", table ? table->num_sets() : 0,
               fwd_svc && fwd_svc->counters().installed ? "the artifact"
               : cfg.lb.enabled                         ? "lb.paths"
                                                        : "nowhere yet (no artifact)",
               l.flow_capacity, static_cast<unsigned>((uint64_t{l.flow_capacity} * 136) >> 20),
               cfg.storm.enabled && cfg.storm.backlog_source == storm::BacklogSource::kHostShim
                   ? "through the verbs shim"
                   : "off (no host index: REPS explores at random)");
    // The feedback join reads the verbs shim's pair index, which the storm thread reads.
    if (storm_svc && cfg.storm.backlog_source == storm::BacklogSource::kHostShim) {
      pipeline::LbControl* lb_ctl = lb_svc->control();
      storm_svc->set_host_listener([lb_ctl](std::shared_ptr<const verbs::HostBacklogIndex> index) {
        lb_ctl->PublishHostBacklog(std::move(index));
      });
    }
  }

  // Spread every (port, RX queue) over the workers, round-robin. A DCB port's are all the RX
  // queues of all its TCs (storm.md §6.7).
  std::vector<pipeline::WorkerSetup> setups(num_workers);
  size_t k = 0;
  for (size_t pi = 0; pi < ports.size(); ++pi) {
    for (uint16_t q : ports[pi].rx_queue_ids()) {
      setups[k++ % num_workers].rx.push_back({static_cast<uint16_t>(pi), ports[pi].port_id(), q});
    }
  }
  for (uint16_t w = 0; w < num_workers; ++w) {
    pipeline::WorkerSetup& s = setups[w];
    s.lcore_id = cfg.worker_lcores[w];
    s.num_ports = static_cast<uint16_t>(ports.size());
    for (size_t pi = 0; pi < ports.size(); ++pi) s.port_ids[pi] = ports[pi].port_id();
    s.tx_queue = w;
    for (size_t pi = 0; pi < ports.size(); ++pi) s.tx_multi_seg[pi] = ports[pi].tx_multi_seg();
    s.burst = cfg.burst_size;
    s.stats = stats->lcore(w);
    s.stop = &stop_workers;
    // STORM's strict-priority egress; without storm the direct TX path (tx-full drops).
    if (cfg.storm.enabled) s.egress_queue_packets = cfg.storm.queue_packets;
    for (size_t pi = 0; pi < ports.size(); ++pi) {
      if (const std::optional<dpdk::DcbQueues>& q = ports[pi].dcb()) {
        s.dcb_ports |= 1u << pi;
        s.level_queue[pi] = q->level_queue[w];
      }
    }
    if (cfg.verify_icrc) s.stages.push_back(std::make_unique<pipeline::IcrcVerifyStage>());
    if (cfg.storm.enabled) {
      // One QP table per worker, allocated here: per-lcore state, off the hot path.
      s.stages.push_back(std::make_unique<pipeline::StormTagStage>(pipeline::StormTagStage::Options{
          .table = {.capacity = config::QpCapacityPerWorker(cfg), .idle_ms = cfg.storm.qp_idle_ms},
          .mtu = cfg.storm.mtu,
          .host_ports = host_ports,
          .backlog_source = cfg.storm.backlog_source,
          .control = storm_svc->control(),
          .worker = w,
          .fabric_guard = cfg.storm.fabric_guard,
          .read_streams = cfg.storm.read_stream_capacity,
          .response_window_ms = cfg.storm.response_window_ms}));
    }
    if (lb_svc) {
      // After storm-tag (which levels the packet whatever its path), before port-fwd (which
      // keeps the egress chosen here). The flow table is allocated here, off the hot path.
      s.stages.push_back(std::make_unique<pipeline::PinSelectStage>(
          pipeline::PinSelectStage::Options{.host_ports = host_ports,
                                            .control = lb_svc->control(),
                                            .worker = w,
                                            .config = LbService::EffectiveParams(cfg)}));
    }
    s.stages.push_back(std::make_unique<pipeline::PortForwardStage>(peer));
    if (s.rx.empty()) {
      HEDDLE_LOG(kWarning, "worker lcore %u has no RX queue to poll; add rx_queues or drop it",
                 s.lcore_id);
    }
    workers.push_back(std::make_unique<pipeline::Worker>(std::move(s)));
  }
  for (uint16_t w = 0; w < num_workers; ++w) {
    int rc =
        rte_eal_remote_launch(&pipeline::Worker::Launch, workers[w].get(), cfg.worker_lcores[w]);
    if (rc != 0) {
      return absl::InternalError(absl::StrCat("cannot launch worker on lcore ",
                                              cfg.worker_lcores[w], ": ", strerror(-rc)));
    }
    workers_running = true;
  }
  if (storm_svc) storm_svc->StartThread();
  // The exposer and the control API serve only once ports and workers run: their threads then
  // never race the main thread's ethdev set-up calls, and an answering socket means a running
  // dataplane.
  if (cfg.metrics_enabled) {
    metrics::MetricsSources src;
    src.snapshot = [this] { return stats->Snapshot(); };
    src.hw_stats = [this] {
      std::vector<metrics::HwPortStats> hw;
      for (const auto& p : ports) {
        dpdk::HwStats h = p.Stats();
        hw.push_back({h.rx_missed, h.rx_errors, h.tx_errors, h.rx_nombuf});
      }
      return hw;
    };
    for (const auto& pc : cfg.ports) src.ports.push_back({pc.name, config::PortRoleName(pc.role)});
    src.version = kVersion;
    if (cfg.storm.enabled) {
      src.storm_levels = cfg.storm.levels.levels;
      src.storm_levels_now = [this] { return storm_svc->max_levels(); };
      src.storm_join = [this] {
        const pipeline::StormWorkerCounters w = storm_svc->control()->counters();
        metrics::StormJoinCounters j;
        j.joined_local = w.resp_joined_local;
        j.joined_remote = w.resp_joined_remote;
        j.no_pair = w.resp_no_pair;
        j.no_entry = w.resp_no_entry;
        j.ring_full = w.resp_ring_full;
        j.malformed = w.resp_malformed;
        j.acks_advanced = w.acks_advanced;
        j.acks_old = w.acks_old;
        j.acks_ahead = w.acks_ahead;
        j.fabric_guarded = w.fabric_guarded;
        return j;
      };
      const bool read_join = cfg.storm.backlog_source == storm::BacklogSource::kHostShim;
      src.storm_reads = [this, read_join] {
        const pipeline::StormWorkerCounters w = storm_svc->control()->counters();
        metrics::StormReadCounters r;
        r.sized = w.read_sized;
        r.unknown = w.read_unknown;
        r.orphans = w.read_orphans;
        r.late = w.read_late;
        r.duplicates = w.read_duplicates;
        r.psn_jumps = w.read_psn_jumps;
        r.abandoned = w.read_abandoned;
        r.overrun = w.read_overrun;
        r.malformed = w.read_malformed;
        r.table_full = w.read_table_full;
        r.window_guarded = w.response_guarded;
        r.join = read_join;
        r.local = w.rreq_local;
        r.remote = w.rreq_remote;
        r.no_pair = w.rreq_no_pair;
        r.no_entry = w.rreq_no_entry;
        r.ring_full = w.rreq_ring_full;
        r.join_malformed = w.rreq_malformed;
        r.pending_full = w.rreq_pending_full;
        r.stale = w.rreq_stale;
        r.too_late = w.rreq_too_late;
        return r;
      };
    }
    if (lb_svc) {
      src.lb = [this] {
        const api::LbView v = lb_svc->View();
        metrics::LbMetrics m;
        for (int k = 0; k < static_cast<int>(lb::BalancerKind::kCount); ++k) {
          m.balancers.push_back(lb::BalancerKindName(static_cast<lb::BalancerKind>(k)));
        }
        m.balancer = v.balancer;
        m.threshold_bytes = v.pin ? v.threshold_bytes : 0;
        m.pinned_flows = v.pinned_flows;
        m.sprayed_flows = v.sprayed_flows;
        m.pinned_packets = v.pinned_packets;
        m.sprayed_packets = v.sprayed_packets;
        m.pinned_bytes = v.pinned_bytes;
        m.sprayed_bytes = v.sprayed_bytes;
        m.stateless_bytes = v.stateless_bytes;
        m.flows_live = v.flows_live;
        m.flow_capacity = v.flow_capacity;
        for (const api::LbCounterView& c : v.counters) {
          if (c.name == lb::LbCounterName(lb::LbCounter::kControl) ||
              c.name == lb::LbCounterName(lb::LbCounter::kTableFull)) {
            m.stateless_packets += c.value;
          }
          // Gauges are exported as such above (flow entries) or not at all (generation).
          if (c.name == "flows-live" || c.name == "flow-capacity" || c.name == "generation") {
            continue;
          }
          m.events.emplace_back(c.name, c.value);
        }
        for (const api::LbPathSetView& s : v.sets) {
          metrics::LbMetrics::Set set;
          set.set = s.set;
          set.jain_index = s.jain_index;
          for (const api::LbPathView& p : s.paths) set.paths.push_back({p.bytes, p.packets});
          m.sets.push_back(std::move(set));
        }
        return m;
      };
    }
    if (fwd_svc) {
      src.fwd = [this] {
        const FwdService::Counters c = fwd_svc->counters();
        return metrics::FwdMetrics{.installs = c.installs,
                                   .rejected = c.rejected,
                                   .rollbacks = c.rollbacks,
                                   .generation = c.generation,
                                   .installed = c.installed};
      };
    }
    HEDDLE_ASSIGN_OR_RETURN(metrics, metrics::MetricsServer::Start(cfg.metrics_listen, src));
    HEDDLE_LOG(kInfo, "metrics at %s", metrics->url().c_str());
  }

  // Last: GetStatus() reads `metrics`, so it must be set before any RPC can arrive.
  HEDDLE_ASSIGN_OR_RETURN(api, api::ApiServer::Start(cfg.control_socket, this));
  HEDDLE_LOG(kInfo, "heddled %s running: %zu port(s), %u worker(s)", kVersion, ports.size(),
             num_workers);
  return absl::OkStatus();
}

void Daemon::Impl::Stop() {
  if (stopped) return;
  stopped = true;
  // The storm thread publishes to the workers (and waits for their grace periods): it goes first.
  if (storm_svc) storm_svc->StopThread();
  if (workers_running) {
    stop_workers.store(true, std::memory_order_release);
    rte_eal_mp_wait_lcore();
    workers_running = false;
  }
  if (storm_svc) storm_svc->WorkersStopped();
  if (lb_svc) lb_svc->WorkersStopped();
  // The API and exposer read ports and stats: shut them before the ports go.
  if (api) api->Shutdown();
  api.reset();
  metrics.reset();
  fwd_svc.reset();
  for (auto& p : ports) p.StopAndClose();
  if (pool) rte_mempool_free(pool);
  pool = nullptr;
  if (eal_up) dpdk::CleanupEal();
  eal_up = false;
}

Daemon::Daemon(config::Config cfg, std::string config_path) : impl_(std::make_unique<Impl>()) {
  impl_->cfg = std::move(cfg);
  impl_->config_path = std::move(config_path);
}

Daemon::~Daemon() { Stop(); }

absl::Status Daemon::Start() {
  absl::Status s = impl_->Start();
  if (!s.ok()) impl_->Stop();
  return s;
}

int Daemon::WaitForSignal() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  int sig = 0;
  while (sigwait(&set, &sig) != 0) {
  }
  HEDDLE_LOG(kInfo, "%s received: stopping", sig == SIGINT ? "SIGINT" : "SIGTERM");
  return sig;
}

void Daemon::Stop() { impl_->Stop(); }

}  // namespace heddle::heddled

// File: tools/heddlectl/show_commands.cc
//
// `heddlectl show ...`: read-only views of the running daemon, one RPC each. Human output is
// tables; -j prints the RPC response unchanged as JSON.
#include <CLI/CLI.hpp>
#include <cinttypes>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "tools/heddlectl/command.h"
#include "tools/heddlectl/table.h"

namespace heddle::api::cli {
namespace {

std::string Uptime(uint64_t seconds) {
  const uint64_t days = seconds / 86400;
  const std::string hms =
      absl::StrFormat("%02d:%02d:%02d", (seconds / 3600) % 24, (seconds / 60) % 60, seconds % 60);
  return days > 0 ? absl::StrCat(days, "d ", hms) : hms;
}

std::string Link(const v1::Port& p) {
  if (!p.link_up()) return "down";
  std::string s = "up";
  if (p.speed_mbps() > 0) {
    s += p.speed_mbps() % 1000 == 0 ? absl::StrCat(" ", p.speed_mbps() / 1000, "G")
                                    : absl::StrCat(" ", p.speed_mbps(), "M");
  }
  s += p.full_duplex() ? " full" : " half";
  return s;
}

std::string BusyPercent(const v1::Lcore& l) {
  if (l.busy_loops() + l.idle_loops() == 0) return "-";
  return absl::StrFormat("%.1f", l.busy_percent());
}

std::string Num(uint64_t v) { return absl::StrCat(v); }

std::string LcoreTable(const google::protobuf::RepeatedPtrField<v1::Lcore>& lcores,
                       bool with_loops) {
  std::vector<Table::Column> columns = {{"LCORE", Table::kRight}, {"ROLE"}};
  if (with_loops) {
    columns.push_back({"BUSY-LOOPS", Table::kRight});
    columns.push_back({"IDLE-LOOPS", Table::kRight});
  }
  columns.push_back({"BUSY%", Table::kRight});
  Table t(std::move(columns));
  for (const v1::Lcore& l : lcores) {
    std::vector<std::string> row = {Num(l.lcore_id()), l.role()};
    if (with_loops) {
      row.push_back(Num(l.busy_loops()));
      row.push_back(Num(l.idle_loops()));
    }
    row.push_back(BusyPercent(l));
    t.AddRow(std::move(row));
  }
  return t.Render();
}

absl::Status ShowStatus(CommandContext& ctx) {
  HEDDLE_ASSIGN_OR_RETURN(v1::GetStatusResponse r, ctx.client.GetStatus());
  if (ctx.options.json) return PrintJson(r, ctx.out);
  ctx.out << RenderKeyValues({
      {"version", r.version()},
      {"pid", Num(r.pid())},
      {"uptime", Uptime(r.uptime_seconds())},
      {"config", r.config_path()},
      {"metrics", r.metrics_url().empty() ? "off" : r.metrics_url()},
      {"socket", ctx.client.socket_path()},
  });
  ctx.out << "\n" << LcoreTable(r.lcores(), /*with_loops=*/false) << "\n";
  Table ports({{"PORT"}, {"ROLE"}, {"DRIVER"}, {"DEVICE"}, {"LINK"}});
  for (const v1::Port& p : r.ports()) {
    ports.AddRow({p.name(), p.role(), p.driver(), p.device(), Link(p)});
  }
  ctx.out << ports.Render();
  return absl::OkStatus();
}

absl::Status ShowPorts(CommandContext& ctx) {
  HEDDLE_ASSIGN_OR_RETURN(v1::GetPortsResponse r, ctx.client.GetPorts());
  if (ctx.options.json) return PrintJson(r, ctx.out);
  Table t({{"PORT"},
           {"ID", Table::kRight},
           {"ROLE"},
           {"DRIVER"},
           {"DEVICE"},
           {"LINK"},
           {"MTU", Table::kRight},
           {"RXQ", Table::kRight},
           {"TXQ", Table::kRight},
           {"MAC"},
           {"PEER"}});
  for (const v1::Port& p : r.ports()) {
    t.AddRow({p.name(), Num(p.port_id()), p.role(), p.driver(), p.device(), Link(p), Num(p.mtu()),
              Num(p.rx_queues()), Num(p.tx_queues()), p.mac(), p.peer()});
  }
  ctx.out << t.Render();
  return absl::OkStatus();
}

absl::Status ShowStats(CommandContext& ctx) {
  HEDDLE_ASSIGN_OR_RETURN(v1::GetStatsResponse r, ctx.client.GetStats());
  if (ctx.options.json) return PrintJson(r, ctx.out);
  Table ports({{"PORT"},
               {"RX-PKTS", Table::kRight},
               {"RX-BYTES", Table::kRight},
               {"TX-PKTS", Table::kRight},
               {"TX-BYTES", Table::kRight},
               {"HW-MISSED", Table::kRight},
               {"HW-RX-ERR", Table::kRight},
               {"HW-TX-ERR", Table::kRight},
               {"NO-MBUF", Table::kRight}});
  // RoCE classes as columns, in the order the daemon reports them.
  std::vector<std::string> classes;
  for (const v1::PortStats& p : r.ports()) {
    ports.AddRow({p.name(), Num(p.rx_packets()), Num(p.rx_bytes()), Num(p.tx_packets()),
                  Num(p.tx_bytes()), Num(p.hw_rx_missed()), Num(p.hw_rx_errors()),
                  Num(p.hw_tx_errors()), Num(p.hw_rx_nombuf())});
    for (const v1::RoceClassCount& c : p.roce_by_class()) {
      if (std::find(classes.begin(), classes.end(), c.class_name()) == classes.end()) {
        classes.push_back(c.class_name());
      }
    }
  }
  ctx.out << ports.Render();

  if (!classes.empty()) {
    std::vector<Table::Column> columns = {{"PORT"}};
    for (const std::string& c : classes) columns.push_back({c, Table::kRight});
    Table roce(std::move(columns));
    for (const v1::PortStats& p : r.ports()) {
      std::map<std::string, uint64_t> by_class;
      for (const v1::RoceClassCount& c : p.roce_by_class()) by_class[c.class_name()] = c.packets();
      std::vector<std::string> row = {p.name()};
      for (const std::string& c : classes) {
        auto it = by_class.find(c);
        row.push_back(it == by_class.end() ? "-" : Num(it->second));
      }
      roce.AddRow(std::move(row));
    }
    ctx.out << "\nRoCEv2 packets received, by opcode class\n" << roce.Render();
  }
  ctx.out << "\n" << LcoreTable(r.lcores(), /*with_loops=*/true);
  return absl::OkStatus();
}

absl::Status ShowDrops(CommandContext& ctx, bool all) {
  HEDDLE_ASSIGN_OR_RETURN(v1::GetDropsResponse r, ctx.client.GetDrops(all));
  if (ctx.options.json) return PrintJson(r, ctx.out);
  if (r.drops().empty()) {
    ctx.out << (all ? "the daemon reports no drop reasons\n"
                    : "no packets dropped (--all lists every reason)\n");
    return absl::OkStatus();
  }
  Table t({{"REASON"}, {"PACKETS", Table::kRight}, {"DESCRIPTION"}});
  for (const v1::Drop& d : r.drops()) t.AddRow({d.reason(), Num(d.packets()), d.description()});
  ctx.out << t.Render() << "total: " << r.total_packets() << " packets dropped\n";
  return absl::OkStatus();
}

absl::Status ShowConfig(CommandContext& ctx) {
  HEDDLE_ASSIGN_OR_RETURN(v1::GetConfigResponse r, ctx.client.GetConfig());
  if (ctx.options.json) return PrintJson(r, ctx.out);
  ctx.out << r.yaml();
  if (!r.yaml().empty() && r.yaml().back() != '\n') ctx.out << '\n';
  return absl::OkStatus();
}

absl::Status ShowRdma(CommandContext& ctx) {
  HEDDLE_ASSIGN_OR_RETURN(v1::GetRdmaResponse r, ctx.client.GetRdma());
  if (ctx.options.json) return PrintJson(r, ctx.out);
  if (r.devices().empty()) {
    ctx.out << (r.note().empty() ? "no RDMA device found" : r.note()) << "\n";
    return absl::OkStatus();
  }
  Table devices({{"DEVICE"}, {"NODE-GUID"}, {"FW"}, {"PORTS", Table::kRight}});
  Table gids({{"DEVICE"},
              {"PORT", Table::kRight},
              {"STATE"},
              {"MTU", Table::kRight},
              {"LINK-LAYER"},
              {"GID-INDEX", Table::kRight},
              {"GID"}});
  for (const v1::RdmaDevice& d : r.devices()) {
    devices.AddRow({d.name(), d.node_guid(), d.fw_ver(), Num(d.ports_size())});
    for (const v1::RdmaPort& p : d.ports()) {
      std::vector<std::string> port_cells = {d.name(), Num(p.port_num()), p.state(),
                                             Num(p.active_mtu()), p.link_layer()};
      if (p.gids().empty()) {
        port_cells.push_back("-");
        port_cells.push_back("-");
        gids.AddRow(port_cells);
      }
      for (const v1::Gid& g : p.gids()) {
        std::vector<std::string> row = port_cells;
        row.push_back(Num(g.index()));
        row.push_back(g.gid());
        gids.AddRow(std::move(row));
      }
    }
  }
  ctx.out << devices.Render() << "\n" << gids.Render();
  if (!r.note().empty()) ctx.out << "\n" << r.note() << "\n";
  return absl::OkStatus();
}

}  // namespace

void RegisterShowCommands(CommandRegistry& registry) {
  registry.Add({.verb = "show",
                .object = "status",
                .help = "version, uptime, pid, lcores, ports and link state, metrics URL",
                .run = ShowStatus});
  registry.Add({.verb = "show",
                .object = "ports",
                .help = "configured ports: driver, device, link, MTU, queues, MAC, peer",
                .run = ShowPorts});
  registry.Add({.verb = "show",
                .object = "stats",
                .help = "per-port packet/byte/driver counters, RoCE by opcode class, lcore load",
                .run = ShowStats});
  auto all = std::make_shared<bool>(false);
  registry.Add({.verb = "show",
                .object = "drops",
                .help = "dropped packets by reason (non-zero only unless --all)",
                .add_options =
                    [all](CLI::App& app) {
                      app.add_flag("-a,--all", *all, "list every drop reason, zeros included");
                    },
                .run = [all](CommandContext& ctx) { return ShowDrops(ctx, *all); }});
  registry.Add({.verb = "show",
                .object = "config",
                .help = "the configuration heddled runs with (YAML)",
                .run = ShowConfig});
  registry.Add({.verb = "show",
                .object = "rdma",
                .help = "RDMA devices, ports, GIDs and MTU",
                .run = ShowRdma});
}

}  // namespace heddle::api::cli

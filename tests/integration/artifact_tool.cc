// heddle-test-artifact: host artifacts of a small fixed fabric for the install tests
// (test_nuwa_install.py), and the path set a host's artifact gives a destination, read through
// fwd::HostTable::Paths4 — the lookup itself, not the prefix list heddled installs — so the test
// checks heddled's output frames against an independent reading of the same artifact.
//
//   heddle-test-artifact make --out A.nuwa --seed 1 [--fabric pod-a] [--role switch]
//   heddle-test-artifact query --artifact A.nuwa --host 5 --dst 10.0.1.2
//     -> one line per path: "<host port> <entropy> <next-hop MAC>", or "<kind>" without paths
//   heddle-test-artifact swap --socket S --a A.nuwa --b B.nuwa --count 1000
//     -> installs B, A, B, ... through the control API (as heddlectl artifact install does, without
//        a process per install); prints "installed N in S seconds"; exits 1 on the first refusal
//
// The fabric: 2 tiers, 4 ToRs of 4 hosts, every host on two ToRs (w_1 = 2: two host ports),
// 4 spines, hosts in 10.0.0.0/8, CRC32 hash with seed `seed`; the entropies per LCA tier are
// derived from the seed, so two seeds give two artifacts whose path sets differ everywhere a set
// has several paths.
#include <arpa/inet.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/time/time.h"
#include "control/api/client.h"
#include "control/nuwa/fabric.h"
#include "dataplane/fwd/artifact.h"

namespace {

using heddle::fwd::ArtifactSpec;

int Usage() {
  std::fprintf(stderr,
               "usage: heddle-test-artifact make --out FILE --seed N [--fabric NAME] "
               "[--role host|switch]\n"
               "       heddle-test-artifact query --artifact FILE --host N --dst IPV4\n"
               "       heddle-test-artifact swap --socket S --a FILE --b FILE --count N\n");
  return 2;
}

ArtifactSpec Spec(uint32_t seed, const std::string& fabric, bool host_role) {
  heddle::nuwa::Shape shape;
  shape.tiers = 2;
  shape.m = {0, 4, 4, 0};
  shape.w = {0, 2, 4, 0};
  heddle::nuwa::AddressPlan plan;
  plan.ipv4_base = 10u << 24;
  plan.ipv4_prefix_len = 8;
  if (!heddle::nuwa::LayOutAddresses(shape, plan).ok()) std::abort();
  ArtifactSpec s;
  s.role = host_role ? heddle::fwd::Role::kHost : heddle::fwd::Role::kSwitch;
  s.tier = host_role ? 0 : 1;
  s.fabric_digest = 0x5eed000000000000ull | seed;
  s.fabric_name = fabric;
  s.role_name = host_role ? "host" : "tor";
  s.shape.tiers = 2;
  s.shape.planes = 1;
  s.shape.m = {0, 4, 4, 0};
  s.shape.w = {0, 2, 4, 0};
  s.addresses.ipv4_base = plan.ipv4_base;
  s.addresses.ipv4_prefix_len = plan.ipv4_prefix_len;
  s.addresses.width = plan.width;
  s.addresses.shift = plan.shift;
  s.hash.function = 1;  // crc32
  s.hash.seed_base = seed;
  s.hash.bit_offset = {0, 0, 8, 0};
  s.max_paths = 8;
  if (host_role) {
    for (uint32_t i = 0; i < 4; ++i) s.entropy.by_lca[2].push_back(0xc000 + seed * 0x100 + i);
  }
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return Usage();
  const std::string cmd = argv[1];
  std::string out, artifact, fabric = "pod-a", role = "host", dst, socket, file_a, file_b;
  uint32_t seed = 0, host = 0, count = 0;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    bool ok = true;
    if (k == "--out") {
      out = v;
    } else if (k == "--artifact") {
      artifact = v;
    } else if (k == "--fabric") {
      fabric = v;
    } else if (k == "--role") {
      role = v;
    } else if (k == "--dst") {
      dst = v;
    } else if (k == "--socket") {
      socket = v;
    } else if (k == "--a") {
      file_a = v;
    } else if (k == "--b") {
      file_b = v;
    } else if (k == "--count") {
      ok = absl::SimpleAtoi(v, &count);
    } else if (k == "--seed") {
      ok = absl::SimpleAtoi(v, &seed);
    } else if (k == "--host") {
      ok = absl::SimpleAtoi(v, &host);
    } else {
      ok = false;
    }
    if (!ok) return Usage();
  }
  if (cmd == "make") {
    if (out.empty() || (role != "host" && role != "switch")) return Usage();
    const std::vector<uint8_t> bytes = heddle::fwd::Serialize(Spec(seed, fabric, role == "host"));
    std::ofstream f(out, std::ios::binary);
    f.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
    return f.good() ? 0 : 1;
  }
  if (cmd == "query") {
    in_addr a;
    if (artifact.empty() || inet_pton(AF_INET, dst.c_str(), &a) != 1) return Usage();
    absl::StatusOr<ArtifactSpec> spec = heddle::fwd::ReadArtifactFile(artifact);
    if (!spec.ok()) {
      std::fprintf(stderr, "%s\n", std::string(spec.status().message()).c_str());
      return 1;
    }
    absl::StatusOr<heddle::fwd::HostTable> t = heddle::fwd::HostTable::Build(*spec, host);
    if (!t.ok()) {
      std::fprintf(stderr, "%s\n", std::string(t.status().message()).c_str());
      return 1;
    }
    heddle::fwd::HostPath paths[heddle::fwd::kMaxHostPaths];
    heddle::fwd::HopKind kind;
    const uint32_t n = t->Paths4(ntohl(a.s_addr), paths, heddle::fwd::kMaxHostPaths, &kind);
    if (n == 0) {
      std::printf("%s\n", kind == heddle::fwd::HopKind::kLocal         ? "local"
                          : kind == heddle::fwd::HopKind::kUnreachable ? "unreachable"
                                                                       : "not-in-fabric");
    }
    for (uint32_t i = 0; i < n; ++i) {
      const auto& m = paths[i].next_hop_mac;
      std::printf("%u %u %02x:%02x:%02x:%02x:%02x:%02x\n", paths[i].port, paths[i].entropy, m[0],
                  m[1], m[2], m[3], m[4], m[5]);
    }
    return 0;
  }
  if (cmd == "swap") {
    if (socket.empty() || file_a.empty() || file_b.empty()) return Usage();
    auto read = [](const std::string& path) {
      std::ifstream f(path, std::ios::binary);
      return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    };
    const std::string a = read(file_a), b = read(file_b);
    auto client = heddle::api::ApiClient::Create(socket, absl::Seconds(10));
    if (!client.ok()) {
      std::fprintf(stderr, "%s\n", std::string(client.status().message()).c_str());
      return 1;
    }
    const auto start = std::chrono::steady_clock::now();
    for (uint32_t i = 0; i < count; ++i) {
      heddle::api::v1::InstallArtifactRequest req;
      req.set_artifact(i % 2 == 0 ? b : a);
      req.set_source(i % 2 == 0 ? file_b : file_a);
      auto r = (*client)->InstallArtifact(req);
      if (!r.ok()) {
        std::fprintf(stderr, "install %u: %s\n", i, std::string(r.status().message()).c_str());
        return 1;
      }
    }
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("installed %u in %.3f seconds\n", count, s);
    return 0;
  }
  return Usage();
}

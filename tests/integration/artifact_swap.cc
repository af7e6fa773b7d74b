// heddle-test-artifact: the 1000-install loop of the install tests (test_nuwa_install.py).
// Installs B, A, B, ... through heddled's control API, as `heddlectl artifact install` does but
// without a process per install; the artifacts themselves come from `heddle-nuwa compile`.
//
//   heddle-test-artifact swap --socket S --a A.nuwa --b B.nuwa --count 1000
//     -> prints "installed N in S seconds"; exits 1 on the first refusal
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/time/time.h"
#include "control/api/client.h"

namespace {

int Usage() {
  std::fprintf(stderr,
               "usage: heddle-test-artifact swap --socket S --a FILE --b FILE --count N\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]) != "swap") return Usage();
  std::string socket, file_a, file_b;
  uint32_t count = 0;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    bool ok = true;
    if (k == "--socket") {
      socket = v;
    } else if (k == "--a") {
      file_a = v;
    } else if (k == "--b") {
      file_b = v;
    } else if (k == "--count") {
      ok = absl::SimpleAtoi(v, &count);
    } else {
      ok = false;
    }
    if (!ok) return Usage();
  }
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
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("installed %u in %.3f seconds\n", count, s);
  return 0;
}

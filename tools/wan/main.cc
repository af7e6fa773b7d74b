// File: tools/wan/main.cc
//
// heddle-wan-delay: a delaying TCP relay for WAN emulation (delay_relay.h, README.md).
//
//   heddle-wan-delay --map 127.0.0.1:17100=10.77.0.2:7100 [--map ...] --delay 20ms
//       [--return-delay 20ms] [--max-buffer 64MiB] [--rate 1gbit] [--socket-buffer 4MiB]
//
// Prints "listening LISTEN -> UPSTREAM" per mapping (with the port bound when LISTEN asked for
// port 0) and then "ready" on stdout. SIGUSR1 prints the counters on stderr; SIGTERM or SIGINT
// closes everything, prints the counters and exits 0.
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/time.h"
#include "tools/wan/delay_relay.h"

namespace {

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "heddle-wan-delay: %s\n", std::string(s.message()).c_str());
  return 2;
}

absl::StatusOr<absl::Duration> ParseDelay(const std::string& flag, const std::string& text) {
  absl::Duration d;
  if (!absl::ParseDuration(text, &d) || d < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--" + flag + " '" + text +
                                      "': expected a non-negative duration such as 20ms or 1.5s");
  }
  return d;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"heddle-wan-delay: TCP relay that delays each byte by a fixed one-way time"};
  std::vector<std::string> maps;
  std::string delay = "0ms", return_delay, max_buffer = "64MiB", rate = "0", socket_buffer = "0";
  app.add_option("--map", maps, "LISTEN=UPSTREAM (repeatable), e.g. 127.0.0.1:0=10.0.0.2:7100")
      ->required();
  app.add_option("--delay", delay, "one-way delay client -> upstream (e.g. 20ms)")
      ->capture_default_str();
  app.add_option("--return-delay", return_delay,
                 "one-way delay upstream -> client; default: --delay");
  app.add_option("--max-buffer", max_buffer,
                 "bytes held per direction of a connection before reading stops (backpressure)")
      ->capture_default_str();
  app.add_option("--rate", rate,
                 "token-bucket cap per direction of each --map, tc units (250mbit, 1gbit); 0: none")
      ->capture_default_str();
  app.add_option("--socket-buffer", socket_buffer,
                 "SO_SNDBUF/SO_RCVBUF of every socket (e.g. 4MiB); 0: kernel autotuning")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  heddle::wan::RelayOptions o;
  std::vector<heddle::wan::SocketAddress> upstreams;
  for (const std::string& m : maps) {
    absl::StatusOr<heddle::wan::Mapping> parsed = heddle::wan::ParseMapping(m);
    if (!parsed.ok()) return Fail(parsed.status());
    o.maps.push_back(*parsed);
    upstreams.push_back(parsed->upstream);
  }
  absl::StatusOr<absl::Duration> d = ParseDelay("delay", delay);
  if (!d.ok()) return Fail(d.status());
  o.delay = *d;
  o.return_delay = *d;
  if (!return_delay.empty()) {
    absl::StatusOr<absl::Duration> rd = ParseDelay("return-delay", return_delay);
    if (!rd.ok()) return Fail(rd.status());
    o.return_delay = *rd;
  }
  absl::StatusOr<uint64_t> mb = heddle::wan::ParseByteSize(max_buffer);
  if (!mb.ok()) return Fail(mb.status());
  o.max_buffer = *mb;
  absl::StatusOr<uint64_t> r = heddle::wan::ParseRateBytesPerSecond(rate);
  if (!r.ok()) return Fail(r.status());
  o.rate_bytes_per_second = *r;
  absl::StatusOr<uint64_t> sb = heddle::wan::ParseByteSize(socket_buffer);
  if (!sb.ok()) return Fail(sb.status());
  if (*sb > (1u << 30)) return Fail(absl::InvalidArgumentError("--socket-buffer: at most 1GiB"));
  o.socket_buffer = static_cast<int>(*sb);

  // Many connections: raise the descriptor limit to the hard limit.
  rlimit nofile;
  if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
    nofile.rlim_cur = nofile.rlim_max;
    setrlimit(RLIMIT_NOFILE, &nofile);
  }
  signal(SIGPIPE, SIG_IGN);
  // The signals go to one thread that waits for them; the loop never sees them.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);

  absl::StatusOr<std::unique_ptr<heddle::wan::DelayRelay>> relay =
      heddle::wan::DelayRelay::Create(std::move(o));
  if (!relay.ok()) return Fail(relay.status());
  std::vector<heddle::wan::SocketAddress> bound = (*relay)->ListenAddresses();
  for (size_t i = 0; i < bound.size(); ++i) {
    std::printf("listening %s -> %s\n", bound[i].ToString().c_str(),
                upstreams[i].ToString().c_str());
  }
  std::printf("ready\n");
  std::fflush(stdout);

  heddle::wan::DelayRelay* rp = relay->get();
  std::thread signals([rp, set] {
    for (;;) {
      int sig = 0;
      if (sigwait(&set, &sig) != 0) continue;
      if (sig == SIGUSR1) {
        std::fprintf(stderr, "heddle-wan-delay: %s\n",
                     heddle::wan::FormatStats(rp->Stats()).c_str());
        continue;
      }
      rp->Stop();
      return;
    }
  });
  rp->Run();
  std::fprintf(stderr, "heddle-wan-delay: exit: %s\n",
               heddle::wan::FormatStats(rp->Stats()).c_str());
  // Run() also returns on an epoll failure: wake the signal thread so it can be joined.
  pthread_kill(signals.native_handle(), SIGTERM);
  signals.join();
  return 0;
}

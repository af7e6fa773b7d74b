// File: tools/wan/delay_relay.h
//
// A delaying TCP relay for WAN emulation (heddle-wan-delay, README.md). The kernel of this machine
// has no netem, so one-way delay is added in user space: the relay listens on one or more
// addresses, connects each accepted connection to its upstream address, and forwards the bytes of
// both directions, each byte written `delay` after it was read (`return_delay` for the upstream ->
// client direction).
//
//   HEDDLE_ASSIGN_OR_RETURN(Mapping m, ParseMapping("127.0.0.1:0=10.77.0.2:7100"));
//   RelayOptions o{.maps = {m}, .delay = absl::Milliseconds(20),
//                  .return_delay = absl::Milliseconds(20)};
//   HEDDLE_ASSIGN_OR_RETURN(std::unique_ptr<DelayRelay> r, DelayRelay::Create(o));
//   std::thread t([&] { r->Run(); });   // ... r->Stop(); t.join();
//
// Guarantees: bytes are never dropped or reordered; each direction buffers at most `max_buffer`
// bytes, and when that is full the relay stops reading the source, so TCP backpressure reaches the
// sender (the relay behaves like a TCP window of `max_buffer` over the emulated path: throughput of
// one connection is at most max_buffer / delay). A FIN is forwarded (shutdown(SHUT_WR)) `delay`
// after it was read and after every byte before it; a reset (RST read, or a write that fails
// because the destination is gone) aborts both sockets with an RST, after `delay` when read.
// Connection set-up is not delayed: the client's connect() completes at the relay, and the first
// byte pays the delay (see README.md).
//
// Threading: Run() is a single-threaded epoll loop; Stop() and Stats() may be called from any
// thread, Stop() also from a signal handler.
#pragma once

#include <sys/socket.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace heddle::wan {

// A resolved socket address (IPv4 or IPv6).
struct SocketAddress {
  sockaddr_storage storage{};
  socklen_t length = 0;
  std::string ToString() const;
};

// "HOST:PORT" or "[V6]:PORT"; HOST may be a name (resolved once, first address).
absl::StatusOr<SocketAddress> ParseSocketAddress(absl::string_view text);

// One forwarding rule: connections accepted on `listen` are relayed to `upstream`.
struct Mapping {
  SocketAddress listen;
  SocketAddress upstream;
};
// "LISTEN=UPSTREAM", e.g. "127.0.0.1:17100=10.77.0.2:7100".
absl::StatusOr<Mapping> ParseMapping(absl::string_view text);

// tc-style rates in bits per second: "250mbit", "1gbit", "10Gbit", "800kbit", "5000bit"; returns
// bytes per second. "0" means unlimited.
absl::StatusOr<uint64_t> ParseRateBytesPerSecond(absl::string_view text);
// Byte sizes: "4096", "64K", "16MiB", "1G" (binary multiples).
absl::StatusOr<uint64_t> ParseByteSize(absl::string_view text);

struct RelayOptions {
  std::vector<Mapping> maps;
  absl::Duration delay = absl::ZeroDuration();         // client -> upstream, one way
  absl::Duration return_delay = absl::ZeroDuration();  // upstream -> client, one way
  // Bytes buffered per direction of each connection (read but not yet written).
  uint64_t max_buffer = 64ull << 20;
  // Token-bucket cap per direction of each mapping (shared by its connections); 0 = none.
  uint64_t rate_bytes_per_second = 0;
  // SO_SNDBUF/SO_RCVBUF for every socket (forced past net.core.*mem_max when root); 0 = kernel
  // autotuning.
  int socket_buffer = 0;
};

struct RelayStats {
  uint64_t connections_accepted = 0;
  uint64_t connections_active = 0;
  uint64_t connect_failures = 0;  // upstream refused or unreachable: the client is reset
  uint64_t resets = 0;            // connections aborted (an RST read, or a write to a dead peer)
  uint64_t bytes_forward = 0;     // client -> upstream, written
  uint64_t bytes_return = 0;      // upstream -> client, written
  uint64_t peak_buffered = 0;     // largest bytes held by one direction of one connection
};

class DelayRelay {
 public:
  // Binds and listens on every mapping's address (port 0 picks a free port; see ListenAddresses).
  static absl::StatusOr<std::unique_ptr<DelayRelay>> Create(RelayOptions options);
  ~DelayRelay();
  DelayRelay(const DelayRelay&) = delete;
  DelayRelay& operator=(const DelayRelay&) = delete;

  // The bound listen addresses, in mapping order.
  std::vector<SocketAddress> ListenAddresses() const;

  // Forwards until Stop(); then closes every connection and listener.
  void Run();
  // Async-signal-safe; Run() returns soon after.
  void Stop();
  RelayStats Stats() const;

 private:
  class Loop;
  explicit DelayRelay(std::unique_ptr<Loop> loop);
  std::unique_ptr<Loop> loop_;
};

std::string FormatStats(const RelayStats& s);

}  // namespace heddle::wan

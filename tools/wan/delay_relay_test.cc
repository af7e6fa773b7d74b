#include "tools/wan/delay_relay.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace heddle::wan {
namespace {

using ::testing::HasSubstr;

// ---- small blocking-socket helpers -----------------------------------------------------------

int Listen(uint16_t* port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  EXPECT_EQ(listen(fd, 256), 0);
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  *port = ntohs(a.sin_port);
  return fd;
}

int Connect(const SocketAddress& to) {
  int fd = socket(to.storage.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  EXPECT_EQ(connect(fd, reinterpret_cast<const sockaddr*>(&to.storage), to.length), 0)
      << std::strerror(errno);
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

bool WriteAll(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= size_t(w);
  }
  return true;
}

// Reads until EOF (or error); returns what arrived and sets *err to errno of a failed read.
std::string ReadToEof(int fd, int* err = nullptr) {
  std::string out;
  char buf[65536];
  for (;;) {
    ssize_t r = recv(fd, buf, sizeof(buf), 0);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      if (err) *err = errno;
      return out;
    }
    if (r == 0) {
      if (err) *err = 0;
      return out;
    }
    out.append(buf, size_t(r));
  }
}

bool ReadExactly(int fd, char* p, size_t n) {
  while (n > 0) {
    ssize_t r = recv(fd, p, n, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= size_t(r);
  }
  return true;
}

std::string RandomBytes(size_t n, uint32_t seed) {
  std::mt19937_64 rng(seed);
  std::string s(n, '\0');
  for (size_t i = 0; i + 8 <= n; i += 8) {
    uint64_t v = rng();
    std::memcpy(&s[i], &v, 8);
  }
  for (size_t i = n - n % 8; i < n; ++i) s[i] = char(rng());
  return s;
}

// A relay in a thread, forwarding 127.0.0.1:0 to the given upstream port.
class RunningRelay {
 public:
  explicit RunningRelay(uint16_t upstream_port, RelayOptions o = {}) {
    absl::StatusOr<Mapping> m =
        ParseMapping("127.0.0.1:0=127.0.0.1:" + std::to_string(upstream_port));
    EXPECT_TRUE(m.ok()) << m.status();
    o.maps = {*m};
    absl::StatusOr<std::unique_ptr<DelayRelay>> r = DelayRelay::Create(o);
    EXPECT_TRUE(r.ok()) << r.status();
    relay_ = std::move(*r);
    thread_ = std::thread([this] { relay_->Run(); });
  }
  ~RunningRelay() {
    relay_->Stop();
    thread_.join();
  }
  SocketAddress address() const { return relay_->ListenAddresses()[0]; }
  DelayRelay& relay() { return *relay_; }

 private:
  std::unique_ptr<DelayRelay> relay_;
  std::thread thread_;
};

// Waits (bounded by the test's ctest timeout) until no connection is open in the relay.
void WaitIdle(DelayRelay& r) {
  while (r.Stats().connections_active != 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

// ---- parsing ----------------------------------------------------------------------------------

TEST(DelayRelayParse, Mapping) {
  absl::StatusOr<Mapping> m = ParseMapping("127.0.0.1:17100=[::1]:7100");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->listen.ToString(), "127.0.0.1:17100");
  EXPECT_EQ(m->upstream.ToString(), "[::1]:7100");
  EXPECT_THAT(ParseMapping("127.0.0.1:17100").status().message(), HasSubstr("LISTEN=UPSTREAM"));
  EXPECT_THAT(ParseMapping("127.0.0.1:70000=127.0.0.1:1").status().message(),
              HasSubstr("0..65535"));
  EXPECT_FALSE(ParseMapping("nohost=127.0.0.1:1").ok());
}

TEST(DelayRelayParse, RateAndSize) {
  EXPECT_EQ(*ParseRateBytesPerSecond("1gbit"), 125'000'000u);
  EXPECT_EQ(*ParseRateBytesPerSecond("250Mbit"), 31'250'000u);
  EXPECT_EQ(*ParseRateBytesPerSecond("0"), 0u);
  EXPECT_THAT(ParseRateBytesPerSecond("1g").status().message(), HasSubstr("gbit"));
  EXPECT_FALSE(ParseRateBytesPerSecond("-5mbit").ok());
  EXPECT_EQ(*ParseByteSize("64MiB"), 64u << 20);
  EXPECT_EQ(*ParseByteSize("4k"), 4096u);
  EXPECT_EQ(*ParseByteSize("1000"), 1000u);
  EXPECT_FALSE(ParseByteSize("lots").ok());
}

TEST(DelayRelayCreate, RejectsBadOptions) {
  EXPECT_FALSE(DelayRelay::Create({}).ok());  // no mapping
  RelayOptions o;
  o.maps = {*ParseMapping("127.0.0.1:0=127.0.0.1:1")};
  o.max_buffer = 0;
  EXPECT_FALSE(DelayRelay::Create(o).ok());
}

TEST(DelayRelayCreate, BusyListenAddressIsAnError) {
  uint16_t port = 0;
  int l = Listen(&port);
  RelayOptions o;
  o.maps = {*ParseMapping("127.0.0.1:" + std::to_string(port) + "=127.0.0.1:1")};
  absl::StatusOr<std::unique_ptr<DelayRelay>> r = DelayRelay::Create(o);
  EXPECT_THAT(r.status().message(), HasSubstr("bind"));
  close(l);
}

// ---- forwarding -------------------------------------------------------------------------------

// Several MB of random bytes each way at once arrive intact and in order.
TEST(DelayRelay, BytesArriveIntactBothDirections) {
  const std::string up = RandomBytes(6 << 20, 1), down = RandomBytes(5 << 20, 2);
  uint16_t port = 0;
  int l = Listen(&port);
  std::string server_got;
  std::thread server([&] {
    int s = accept(l, nullptr, nullptr);
    std::thread w([&] {
      WriteAll(s, down.data(), down.size());
      shutdown(s, SHUT_WR);
    });
    server_got = ReadToEof(s);
    w.join();
    close(s);
  });
  RelayOptions o;
  o.delay = absl::Milliseconds(5);
  o.max_buffer = 1 << 20;
  RunningRelay relay(port, o);
  int c = Connect(relay.address());
  std::thread w([&] {
    WriteAll(c, up.data(), up.size());
    shutdown(c, SHUT_WR);
  });
  std::string client_got = ReadToEof(c);
  w.join();
  server.join();
  close(c);
  close(l);
  EXPECT_TRUE(server_got == up) << "server got " << server_got.size() << " of " << up.size();
  EXPECT_TRUE(client_got == down) << "client got " << client_got.size() << " of " << down.size();
  WaitIdle(relay.relay());
  RelayStats s = relay.relay().Stats();
  EXPECT_EQ(s.connections_accepted, 1u);
  EXPECT_EQ(s.bytes_forward, up.size());
  EXPECT_EQ(s.bytes_return, down.size());
  EXPECT_EQ(s.resets, 0u);
}

// A one-byte ping-pong takes at least delay + return_delay per round trip.
TEST(DelayRelay, DelayIsApplied) {
  uint16_t port = 0;
  int l = Listen(&port);
  std::thread server([&] {
    int s = accept(l, nullptr, nullptr);
    int one = 1;
    setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    char b;
    while (ReadExactly(s, &b, 1)) WriteAll(s, &b, 1);
    close(s);
  });
  RelayOptions o;
  o.delay = absl::Milliseconds(30);
  o.return_delay = absl::Milliseconds(10);
  RunningRelay relay(port, o);
  int c = Connect(relay.address());
  for (int i = 0; i < 5; ++i) {
    char b = char('a' + i), r = 0;
    auto t0 = std::chrono::steady_clock::now();
    ASSERT_TRUE(WriteAll(c, &b, 1));
    ASSERT_TRUE(ReadExactly(c, &r, 1));
    auto rtt = std::chrono::steady_clock::now() - t0;
    EXPECT_EQ(r, b);
    EXPECT_GE(rtt, std::chrono::milliseconds(40)) << "round trip " << i;
  }
  close(c);
  server.join();
  close(l);
}

// A tiny buffer still delivers everything (the relay stops reading when full, it never drops)
// and never holds more than max_buffer bytes of a direction.
TEST(DelayRelay, BackpressureWithTinyBuffer) {
  const std::string data = RandomBytes(2 << 20, 3);
  uint16_t port = 0;
  int l = Listen(&port);
  std::string got;
  std::thread server([&] {
    int s = accept(l, nullptr, nullptr);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // a slow reader at first
    got = ReadToEof(s);
    close(s);
  });
  RelayOptions o;
  o.delay = absl::Milliseconds(1);
  o.max_buffer = 4000;  // at most 4000 bytes per ms of delay: ~0.5 s for 2 MiB
  RunningRelay relay(port, o);
  int c = Connect(relay.address());
  ASSERT_TRUE(WriteAll(c, data.data(), data.size()));
  shutdown(c, SHUT_WR);
  server.join();
  EXPECT_TRUE(got == data) << "got " << got.size() << " of " << data.size();
  EXPECT_EQ(ReadToEof(c), "");
  close(c);
  close(l);
  EXPECT_LE(relay.relay().Stats().peak_buffered, 4000u);
  EXPECT_GT(relay.relay().Stats().peak_buffered, 0u);
}

// The client's FIN reaches the server, which can still answer over the other half.
TEST(DelayRelay, HalfCloseBothWays) {
  uint16_t port = 0;
  int l = Listen(&port);
  std::string server_got;
  std::thread server([&] {
    int s = accept(l, nullptr, nullptr);
    server_got = ReadToEof(s);  // returns only once the client's FIN came through
    std::string reply = "got " + std::to_string(server_got.size());
    WriteAll(s, reply.data(), reply.size());
    shutdown(s, SHUT_WR);
    EXPECT_EQ(ReadToEof(s), "");
    close(s);
  });
  RelayOptions o;
  o.delay = absl::Milliseconds(5);
  RunningRelay relay(port, o);
  int c = Connect(relay.address());
  ASSERT_TRUE(WriteAll(c, "hello", 5));
  shutdown(c, SHUT_WR);
  int err = -1;
  EXPECT_EQ(ReadToEof(c, &err), "got 5");
  EXPECT_EQ(err, 0);  // a FIN, not a reset
  server.join();
  close(c);
  close(l);
  WaitIdle(relay.relay());
  EXPECT_EQ(relay.relay().Stats().resets, 0u);
}

// An abortive close on one side reaches the other side as a reset.
TEST(DelayRelay, ResetFromServerReachesClient) {
  uint16_t port = 0;
  int l = Listen(&port);
  std::thread server([&] {
    int s = accept(l, nullptr, nullptr);
    char b;
    ReadExactly(s, &b, 1);
    linger lg{.l_onoff = 1, .l_linger = 0};
    setsockopt(s, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
    close(s);
  });
  RelayOptions o;
  o.delay = absl::Milliseconds(5);
  RunningRelay relay(port, o);
  int c = Connect(relay.address());
  ASSERT_TRUE(WriteAll(c, "x", 1));
  int err = 0;
  ReadToEof(c, &err);
  EXPECT_EQ(err, ECONNRESET);
  server.join();
  close(c);
  close(l);
  WaitIdle(relay.relay());
  EXPECT_EQ(relay.relay().Stats().resets, 1u);
}

TEST(DelayRelay, ResetFromClientReachesServer) {
  uint16_t port = 0;
  int l = Listen(&port);
  int server_err = 0;
  std::string server_got;
  std::thread server([&] {
    int s = accept(l, nullptr, nullptr);
    server_got = ReadToEof(s, &server_err);
    close(s);
  });
  RelayOptions o;
  o.delay = absl::Milliseconds(5);
  RunningRelay relay(port, o);
  int c = Connect(relay.address());
  ASSERT_TRUE(WriteAll(c, "abc", 3));
  std::this_thread::sleep_for(std::chrono::milliseconds(30));  // let "abc" through first
  linger lg{.l_onoff = 1, .l_linger = 0};
  setsockopt(c, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
  close(c);
  server.join();
  close(l);
  EXPECT_EQ(server_got, "abc");
  EXPECT_EQ(server_err, ECONNRESET);
}

// A refused upstream connection resets the client and is counted.
TEST(DelayRelay, UpstreamRefusedResetsClient) {
  uint16_t port = 0;
  int l = Listen(&port);
  close(l);  // nothing listens on `port` now
  RunningRelay relay(port);
  int c = Connect(relay.address());
  int err = 0;
  ReadToEof(c, &err);
  EXPECT_EQ(err, ECONNRESET);
  close(c);
  WaitIdle(relay.relay());
  EXPECT_EQ(relay.relay().Stats().connect_failures, 1u);
}

// Many concurrent connections, each an echo of its own random bytes.
TEST(DelayRelay, ManyConcurrentConnections) {
  constexpr int kConns = 64;
  uint16_t port = 0;
  int l = Listen(&port);
  std::thread server([&] {
    std::vector<std::thread> echo;
    for (int i = 0; i < kConns; ++i) {
      int s = accept(l, nullptr, nullptr);
      echo.emplace_back([s] {
        char buf[16384];
        for (;;) {
          ssize_t r = recv(s, buf, sizeof(buf), 0);
          if (r <= 0) break;
          WriteAll(s, buf, size_t(r));
        }
        shutdown(s, SHUT_WR);
        close(s);
      });
    }
    for (auto& t : echo) t.join();
  });
  RelayOptions o;
  o.delay = absl::Milliseconds(2);
  o.max_buffer = 64 << 10;
  RunningRelay relay(port, o);
  std::atomic<int> intact{0};
  std::vector<std::thread> clients;
  for (int i = 0; i < kConns; ++i) {
    clients.emplace_back([&, i] {
      const std::string data = RandomBytes(200'000 + i * 1000, 100 + i);
      int c = Connect(relay.address());
      std::thread w([&] {
        WriteAll(c, data.data(), data.size());
        shutdown(c, SHUT_WR);
      });
      std::string got = ReadToEof(c);
      w.join();
      close(c);
      if (got == data) intact.fetch_add(1);
    });
  }
  for (auto& t : clients) t.join();
  server.join();
  close(l);
  EXPECT_EQ(intact.load(), kConns);
  WaitIdle(relay.relay());
  RelayStats s = relay.relay().Stats();
  EXPECT_EQ(s.connections_accepted, uint64_t(kConns));
  EXPECT_EQ(s.resets, 0u);
}

// Several mappings in one relay: each listen address reaches its own upstream.
TEST(DelayRelay, SeveralMappingsInOneRelay) {
  uint16_t port_a = 0, port_b = 0;
  int la = Listen(&port_a), lb = Listen(&port_b);
  auto answer = [](int l, std::string name) {
    int s = accept(l, nullptr, nullptr);
    WriteAll(s, name.data(), name.size());
    shutdown(s, SHUT_WR);
    ReadToEof(s);
    close(s);
  };
  std::thread sa(answer, la, "upstream a"), sb(answer, lb, "upstream b");
  RelayOptions o;
  o.maps = {*ParseMapping("127.0.0.1:0=127.0.0.1:" + std::to_string(port_a)),
            *ParseMapping("127.0.0.1:0=127.0.0.1:" + std::to_string(port_b))};
  o.delay = o.return_delay = absl::Milliseconds(2);
  absl::StatusOr<std::unique_ptr<DelayRelay>> r = DelayRelay::Create(o);
  ASSERT_TRUE(r.ok()) << r.status();
  std::thread loop([&] { (*r)->Run(); });
  std::vector<SocketAddress> listen = (*r)->ListenAddresses();
  ASSERT_EQ(listen.size(), 2u);
  EXPECT_NE(listen[0].ToString(), listen[1].ToString());
  int cb = Connect(listen[1]), ca = Connect(listen[0]);
  shutdown(ca, SHUT_WR);
  shutdown(cb, SHUT_WR);
  EXPECT_EQ(ReadToEof(ca), "upstream a");
  EXPECT_EQ(ReadToEof(cb), "upstream b");
  sa.join();
  sb.join();
  close(ca);
  close(cb);
  close(la);
  close(lb);
  (*r)->Stop();
  loop.join();
  EXPECT_EQ((*r)->Stats().connections_accepted, 2u);
}

// With --rate, a transfer cannot beat the cap: B bytes take at least (B - burst) / rate.
TEST(DelayRelay, RateCapIsALowerBoundOnTransferTime) {
  const std::string data = RandomBytes(1 << 20, 4);
  uint16_t port = 0;
  int l = Listen(&port);
  std::string got;
  std::thread server([&] {
    int s = accept(l, nullptr, nullptr);
    got = ReadToEof(s);
    close(s);
  });
  RelayOptions o;
  o.rate_bytes_per_second = 4 << 20;  // 4 MiB/s; burst = 64 KiB
  RunningRelay relay(port, o);
  int c = Connect(relay.address());
  auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(WriteAll(c, data.data(), data.size()));
  shutdown(c, SHUT_WR);
  server.join();
  auto took = std::chrono::steady_clock::now() - t0;
  close(c);
  close(l);
  EXPECT_TRUE(got == data);
  // (1 MiB - 64 KiB) / 4 MiB/s = 234 ms.
  EXPECT_GE(took, std::chrono::milliseconds(234));
}

// Stop() while connections are open closes them and returns.
TEST(DelayRelay, StopClosesOpenConnections) {
  uint16_t port = 0;
  int l = Listen(&port);
  auto relay = std::make_unique<RunningRelay>(port);
  int c = Connect(relay->address());
  int s = accept(l, nullptr, nullptr);
  ASSERT_TRUE(WriteAll(c, "x", 1));
  char b;
  ASSERT_TRUE(ReadExactly(s, &b, 1));
  relay.reset();  // Stop + join
  EXPECT_EQ(ReadToEof(s), "");
  EXPECT_EQ(ReadToEof(c), "");
  close(s);
  close(c);
  close(l);
}

}  // namespace
}  // namespace heddle::wan

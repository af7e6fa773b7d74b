#include "tools/wan/delay_relay.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <limits>
#include <queue>
#include <unordered_map>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "common/log.h"

namespace heddle::wan {
namespace {

constexpr int64_t kNever = std::numeric_limits<int64_t>::max();

int64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

std::string ErrnoText(int err) { return std::strerror(err); }

}  // namespace

std::string SocketAddress::ToString() const {
  char host[INET6_ADDRSTRLEN] = "?";
  if (storage.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&storage);
    inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
    return absl::StrCat(host, ":", ntohs(a->sin_port));
  }
  if (storage.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&storage);
    inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
    return absl::StrCat("[", host, "]:", ntohs(a->sin6_port));
  }
  return "?";
}

absl::StatusOr<SocketAddress> ParseSocketAddress(absl::string_view text) {
  std::string host;
  absl::string_view port;
  if (absl::StartsWith(text, "[")) {
    size_t close = text.find(']');
    if (close == absl::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      return absl::InvalidArgumentError(absl::StrCat("address '", text, "': expected [IPV6]:PORT"));
    }
    host = std::string(text.substr(1, close - 1));
    port = text.substr(close + 2);
  } else {
    size_t colon = text.rfind(':');
    if (colon == absl::string_view::npos || colon == 0) {
      return absl::InvalidArgumentError(absl::StrCat("address '", text, "': expected HOST:PORT"));
    }
    host = std::string(text.substr(0, colon));
    port = text.substr(colon + 1);
  }
  uint32_t port_number = 0;
  if (!absl::SimpleAtoi(port, &port_number) || port_number > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("address '", text, "': port '", port, "' is not a number in 0..65535"));
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* result = nullptr;
  int rc = getaddrinfo(host.c_str(), nullptr, &hints, &result);
  if (rc != 0 || result == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("address '", text, "': cannot resolve '", host, "': ", gai_strerror(rc)));
  }
  SocketAddress out;
  std::memcpy(&out.storage, result->ai_addr, result->ai_addrlen);
  out.length = result->ai_addrlen;
  freeaddrinfo(result);
  if (out.storage.ss_family == AF_INET) {
    reinterpret_cast<sockaddr_in*>(&out.storage)->sin_port = htons(port_number);
  } else {
    reinterpret_cast<sockaddr_in6*>(&out.storage)->sin6_port = htons(port_number);
  }
  return out;
}

absl::StatusOr<Mapping> ParseMapping(absl::string_view text) {
  size_t eq = text.find('=');
  if (eq == absl::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "mapping '", text, "': expected LISTEN=UPSTREAM, e.g. 127.0.0.1:17100=10.77.0.2:7100"));
  }
  Mapping m;
  absl::StatusOr<SocketAddress> listen = ParseSocketAddress(text.substr(0, eq));
  if (!listen.ok()) return listen.status();
  absl::StatusOr<SocketAddress> upstream = ParseSocketAddress(text.substr(eq + 1));
  if (!upstream.ok()) return upstream.status();
  m.listen = *listen;
  m.upstream = *upstream;
  return m;
}

absl::StatusOr<uint64_t> ParseRateBytesPerSecond(absl::string_view text) {
  std::string lower = absl::AsciiStrToLower(text);
  absl::string_view t = lower;
  double multiplier = 1;
  if (absl::ConsumeSuffix(&t, "gbit")) {
    multiplier = 1e9;
  } else if (absl::ConsumeSuffix(&t, "mbit")) {
    multiplier = 1e6;
  } else if (absl::ConsumeSuffix(&t, "kbit")) {
    multiplier = 1e3;
  } else if (absl::ConsumeSuffix(&t, "bit")) {
    multiplier = 1;
  } else if (t != "0") {
    return absl::InvalidArgumentError(absl::StrCat(
        "rate '", text, "': expected a number with a unit bit, kbit, mbit or gbit (e.g. 1gbit)"));
  }
  double value = 0;
  if (!absl::SimpleAtod(t, &value) || value < 0 || !(value * multiplier < 1e15)) {
    return absl::InvalidArgumentError(
        absl::StrCat("rate '", text, "': '", t, "' is not a non-negative number"));
  }
  return static_cast<uint64_t>(value * multiplier / 8);
}

absl::StatusOr<uint64_t> ParseByteSize(absl::string_view text) {
  std::string upper = absl::AsciiStrToUpper(text);
  absl::string_view t = upper;
  if (!absl::ConsumeSuffix(&t, "IB")) absl::ConsumeSuffix(&t, "B");
  uint64_t multiplier = 1;
  if (absl::ConsumeSuffix(&t, "K")) {
    multiplier = 1ull << 10;
  } else if (absl::ConsumeSuffix(&t, "M")) {
    multiplier = 1ull << 20;
  } else if (absl::ConsumeSuffix(&t, "G")) {
    multiplier = 1ull << 30;
  }
  uint64_t value = 0;
  if (!absl::SimpleAtoi(t, &value) || value > (1ull << 50) / multiplier) {
    return absl::InvalidArgumentError(
        absl::StrCat("size '", text, "': expected a byte count such as 4096, 64K, 16MiB or 1G"));
  }
  return value * multiplier;
}

std::string FormatStats(const RelayStats& s) {
  return absl::StrFormat(
      "connections accepted=%d active=%d connect_failures=%d resets=%d; bytes forward=%d "
      "return=%d; peak_buffered=%d",
      s.connections_accepted, s.connections_active, s.connect_failures, s.resets, s.bytes_forward,
      s.bytes_return, s.peak_buffered);
}

// ---------------------------------------------------------------------------------------------
// The event loop.
//
// Every connection has two sockets (side 0: the accepted client, side 1: the upstream) and two
// directions (0: client -> upstream with `delay`, 1: upstream -> client with `return_delay`).
// A direction holds what it read in a list of fixed-size chunks plus a FIFO of marks
// {end offset, release time}: bytes up to a mark's end may be written once its release time has
// passed. All sockets are edge-triggered; each direction remembers whether its source may still
// have data (`readable`) and its destination may take more (`writable`), so the loop never needs
// epoll_ctl after registration. Timed work (a mark or FIN coming due, a rate-limit refill, a
// delayed abort) goes into one min-heap of {time, connection id, direction}; each direction keeps
// the time of its earliest pending heap entry (`armed_ns`) so it is scheduled at most once per
// deadline, and stale entries (for closed connections) are skipped by id. A timerfd armed at the
// heap's top wakes epoll_wait with nanosecond resolution.
// ---------------------------------------------------------------------------------------------

namespace {

constexpr size_t kChunkBytes = 256 << 10;
constexpr size_t kMaxReadBytes = 1 << 20;  // per read() call
constexpr int kMaxIov = 16;
constexpr size_t kPooledChunks = 256;  // 64 MiB kept for reuse: 256 KiB chunks are mmap-sized

struct Chunk {
  size_t begin = 0;
  size_t end = 0;
  char data[kChunkBytes];
};

struct Mark {
  uint64_t end;  // read_total after the read this mark closes
  int64_t release_ns;
};

struct TokenBucket {
  uint64_t rate = 0;  // bytes per second; 0 = unlimited
  double tokens = 0;
  double burst = 0;
  int64_t last_ns = 0;
  void Refill(int64_t now) {
    tokens = std::min(burst, tokens + double(now - last_ns) * double(rate) / 1e9);
    last_ns = now;
  }
};

struct Direction {
  int delay_ns_index = 0;
  std::deque<Chunk*> chunks;
  std::deque<Mark> marks;
  uint64_t read_total = 0;
  uint64_t released_total = 0;
  uint64_t written_total = 0;
  bool readable = false;
  bool peer_closed = false;  // the source signalled FIN/RST/error: read on until 0 or error
  bool writable = false;
  bool eof_read = false;
  int64_t eof_release_ns = kNever;
  bool shut_wr = false;
  int64_t armed_ns = kNever;
  uint64_t buffered() const { return read_total - written_total; }
};

struct Connection {
  uint64_t id = 0;
  size_t map = 0;
  int fd[2] = {-1, -1};
  bool connecting = true;
  Direction dir[2];
  int64_t abort_ns = kNever;
};

struct TimerEntry {
  int64_t when;
  uint64_t conn_id;
  int what;  // 0, 1: a direction; 2: the connection's abort
  bool operator>(const TimerEntry& o) const { return when > o.when; }
};

// epoll_event.data.u64 tags: connection sockets carry (id << 1) | side; the others are below.
constexpr uint64_t kTagWake = 1ull << 63;
constexpr uint64_t kTagTimer = kTagWake + 1;
constexpr uint64_t kTagListener = kTagWake + 2;  // + mapping index

void SetBuffers(int fd, int bytes) {
  if (bytes <= 0) return;
  if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &bytes, sizeof(bytes)) != 0) {
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof(bytes));
  }
  if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &bytes, sizeof(bytes)) != 0) {
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof(bytes));
  }
}

void AbortSocket(int fd) {
  if (fd < 0) return;
  linger l{.l_onoff = 1, .l_linger = 0};
  setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
  close(fd);
}

}  // namespace

class DelayRelay::Loop {
 public:
  explicit Loop(RelayOptions o) : options_(std::move(o)) {
    delay_ns_[0] = absl::ToInt64Nanoseconds(options_.delay);
    delay_ns_[1] = absl::ToInt64Nanoseconds(options_.return_delay);
  }
  ~Loop() {
    for (auto& [id, c] : conns_) CloseConnection(*c, /*abort=*/false, /*erase=*/false);
    conns_.clear();
    for (int fd : listeners_) close(fd);
    for (Chunk* c : pool_) delete c;
    if (epoll_fd_ >= 0) close(epoll_fd_);
    if (wake_fd_ >= 0) close(wake_fd_);
    if (timer_fd_ >= 0) close(timer_fd_);
  }

  absl::Status Init() {
    if (options_.maps.empty()) return absl::InvalidArgumentError("no --map given");
    if (options_.max_buffer == 0) return absl::InvalidArgumentError("--max-buffer must be > 0");
    if (options_.delay < absl::ZeroDuration() || options_.return_delay < absl::ZeroDuration()) {
      return absl::InvalidArgumentError("delays must be >= 0");
    }
    epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
    wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    timer_fd_ = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (epoll_fd_ < 0 || wake_fd_ < 0 || timer_fd_ < 0) {
      return absl::InternalError(absl::StrCat("epoll/eventfd/timerfd: ", ErrnoText(errno)));
    }
    Register(wake_fd_, EPOLLIN, kTagWake);
    Register(timer_fd_, EPOLLIN, kTagTimer);
    const int64_t now = NowNs();
    for (size_t i = 0; i < options_.maps.size(); ++i) {
      const Mapping& m = options_.maps[i];
      int fd = socket(m.listen.storage.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
      if (fd < 0) return absl::InternalError(absl::StrCat("socket: ", ErrnoText(errno)));
      listeners_.push_back(fd);
      int one = 1;
      setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
      SetBuffers(fd, options_.socket_buffer);  // inherited by accepted sockets
      if (bind(fd, reinterpret_cast<const sockaddr*>(&m.listen.storage), m.listen.length) != 0) {
        return absl::UnavailableError(absl::StrCat("listen address ", m.listen.ToString(),
                                                   ": bind: ", ErrnoText(errno),
                                                   "; is another process using it?"));
      }
      if (listen(fd, 1024) != 0) {
        return absl::UnavailableError(
            absl::StrCat("listen ", m.listen.ToString(), ": ", ErrnoText(errno)));
      }
      SocketAddress bound;
      bound.length = sizeof(bound.storage);
      getsockname(fd, reinterpret_cast<sockaddr*>(&bound.storage), &bound.length);
      bound_.push_back(bound);
      Register(fd, EPOLLIN, kTagListener + i);
      for (int d = 0; d < 2; ++d) {
        TokenBucket b;
        b.rate = options_.rate_bytes_per_second;
        // 2 ms of traffic, at least 64 KiB, so a GSO-sized write fits.
        b.burst = std::max(65536.0, double(b.rate) * 0.002);
        b.tokens = b.burst;
        b.last_ns = now;
        buckets_.push_back(b);
      }
    }
    return absl::OkStatus();
  }

  std::vector<SocketAddress> bound() const { return bound_; }

  void Stop() {
    stop_.store(true, std::memory_order_release);
    uint64_t one = 1;
    ssize_t rc = write(wake_fd_, &one, sizeof(one));
    (void)rc;
  }

  RelayStats Stats() const {
    RelayStats s;
    s.connections_accepted = accepted_.load(std::memory_order_relaxed);
    s.connections_active = active_.load(std::memory_order_relaxed);
    s.connect_failures = connect_failures_.load(std::memory_order_relaxed);
    s.resets = resets_.load(std::memory_order_relaxed);
    s.bytes_forward = bytes_[0].load(std::memory_order_relaxed);
    s.bytes_return = bytes_[1].load(std::memory_order_relaxed);
    s.peak_buffered = peak_buffered_.load(std::memory_order_relaxed);
    return s;
  }

  void Run() {
    epoll_event events[256];
    while (!stop_.load(std::memory_order_acquire)) {
      ArmTimer();
      int n = epoll_wait(epoll_fd_, events, 256, -1);
      if (n < 0) {
        if (errno == EINTR) continue;
        HEDDLE_LOG(kError, "heddle-wan-delay: epoll_wait: %s", ErrnoText(errno).c_str());
        break;
      }
      const int64_t now = NowNs();
      for (int i = 0; i < n; ++i) {
        const uint64_t tag = events[i].data.u64;
        const uint32_t ev = events[i].events;
        if (tag == kTagWake) {
          uint64_t v;
          ssize_t rc = read(wake_fd_, &v, sizeof(v));
          (void)rc;
        } else if (tag == kTagTimer) {
          uint64_t v;
          ssize_t rc = read(timer_fd_, &v, sizeof(v));
          (void)rc;
          timer_armed_ns_ = kNever;
        } else if (tag >= kTagListener) {
          Accept(tag - kTagListener, now);
        } else {
          OnSocket(tag >> 1, int(tag & 1), ev, now);
        }
      }
      RunTimers(NowNs());
    }
    for (auto& [id, c] : conns_) CloseConnection(*c, /*abort=*/false, /*erase=*/false);
    conns_.clear();
  }

 private:
  void Register(int fd, uint32_t events, uint64_t tag) {
    epoll_event e{};
    e.events = events;
    e.data.u64 = tag;
    epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &e);
  }

  void ArmTimer() {
    if (heap_.empty() || heap_.top().when >= timer_armed_ns_) return;
    timer_armed_ns_ = heap_.top().when;
    itimerspec spec{};
    int64_t when = std::max<int64_t>(timer_armed_ns_, 1);
    spec.it_value.tv_sec = when / 1'000'000'000;
    spec.it_value.tv_nsec = when % 1'000'000'000;
    timerfd_settime(timer_fd_, TFD_TIMER_ABSTIME, &spec, nullptr);
  }

  void Schedule(Connection& c, int what, int64_t when) {
    if (what < 2) {
      Direction& d = c.dir[what];
      if (d.armed_ns <= when) return;  // an earlier wake-up re-evaluates this direction
      d.armed_ns = when;
    }
    heap_.push({when, c.id, what});
  }

  void RunTimers(int64_t now) {
    while (!heap_.empty() && heap_.top().when <= now) {
      TimerEntry e = heap_.top();
      heap_.pop();
      auto it = conns_.find(e.conn_id);
      if (it == conns_.end()) continue;
      Connection& c = *it->second;
      if (e.what < 2) {
        if (c.dir[e.what].armed_ns != e.when) continue;  // superseded by an earlier entry
        c.dir[e.what].armed_ns = kNever;
      }
      Pump(c, now);
    }
  }

  void Accept(size_t map, int64_t now) {
    const Mapping& m = options_.maps[map];
    for (int i = 0; i < 64; ++i) {
      int cfd = accept4(listeners_[map], nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (cfd < 0) {
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ECONNABORTED) {
          HEDDLE_LOG(kWarning, "heddle-wan-delay: accept on %s: %s", m.listen.ToString().c_str(),
                     ErrnoText(errno).c_str());
        }
        return;
      }
      accepted_.fetch_add(1, std::memory_order_relaxed);
      int ufd = socket(m.upstream.storage.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
      if (ufd < 0) {
        HEDDLE_LOG(kWarning, "heddle-wan-delay: socket: %s", ErrnoText(errno).c_str());
        connect_failures_.fetch_add(1, std::memory_order_relaxed);
        AbortSocket(cfd);
        continue;
      }
      int one = 1;
      setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      setsockopt(ufd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      SetBuffers(ufd, options_.socket_buffer);
      int rc =
          connect(ufd, reinterpret_cast<const sockaddr*>(&m.upstream.storage), m.upstream.length);
      if (rc != 0 && errno != EINPROGRESS) {
        connect_failures_.fetch_add(1, std::memory_order_relaxed);
        close(ufd);
        AbortSocket(cfd);
        continue;
      }
      auto c = std::make_unique<Connection>();
      c->id = next_id_++;
      c->map = map;
      c->fd[0] = cfd;
      c->fd[1] = ufd;
      c->connecting = rc != 0;
      const uint32_t et = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
      Register(cfd, et, c->id << 1);
      Register(ufd, et, (c->id << 1) | 1);
      active_.fetch_add(1, std::memory_order_relaxed);
      Connection& ref = *c;
      conns_.emplace(c->id, std::move(c));
      (void)now;
      (void)ref;
    }
  }

  void OnSocket(uint64_t id, int side, uint32_t ev, int64_t now) {
    auto it = conns_.find(id);
    if (it == conns_.end()) return;
    Connection& c = *it->second;
    if (side == 1 && c.connecting) {
      if (!(ev & (EPOLLOUT | EPOLLERR | EPOLLHUP))) return;
      int err = 0;
      socklen_t len = sizeof(err);
      getsockopt(c.fd[1], SOL_SOCKET, SO_ERROR, &err, &len);
      if (err != 0 || (ev & EPOLLERR)) {
        HEDDLE_LOG(kDebug, "heddle-wan-delay: connect %s: %s",
                   options_.maps[c.map].upstream.ToString().c_str(), ErrnoText(err).c_str());
        connect_failures_.fetch_add(1, std::memory_order_relaxed);
        CloseConnection(c, /*abort=*/true, /*erase=*/true);
        return;
      }
      c.connecting = false;
    }
    // Side s is the source of direction s and the destination of direction 1 - s.
    if (ev & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) c.dir[side].readable = true;
    if (ev & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) c.dir[side].peer_closed = true;
    if (ev & (EPOLLOUT | EPOLLHUP | EPOLLERR)) c.dir[1 - side].writable = true;
    Pump(c, now);
  }

  Chunk* NewChunk() {
    if (!pool_.empty()) {
      Chunk* c = pool_.back();
      pool_.pop_back();
      c->begin = c->end = 0;
      return c;
    }
    Chunk* c = new Chunk;
    return c;
  }
  void FreeChunk(Chunk* c) {
    if (pool_.size() < kPooledChunks) {
      pool_.push_back(c);
    } else {
      delete c;
    }
  }

  // Reads what the source has, up to max_buffer. Returns bytes read; sets *reset on RST.
  size_t ReadSome(Connection& c, int di, int64_t now, bool* reset) {
    Direction& d = c.dir[di];
    size_t total = 0;
    while (d.readable && !d.eof_read && d.buffered() < options_.max_buffer) {
      size_t want = std::min<uint64_t>(options_.max_buffer - d.buffered(), kMaxReadBytes);
      iovec iov[kMaxIov];
      size_t chunk_of[kMaxIov];  // index in d.chunks of each iov
      int niov = 0;
      size_t planned = 0;
      if (!d.chunks.empty() && d.chunks.back()->end < kChunkBytes) {
        Chunk* t = d.chunks.back();
        size_t n = std::min(want, kChunkBytes - t->end);
        chunk_of[niov] = d.chunks.size() - 1;
        iov[niov++] = {t->data + t->end, n};
        planned += n;
      }
      const size_t first_new = d.chunks.size();
      while (planned < want && niov < kMaxIov) {
        d.chunks.push_back(NewChunk());
        size_t n = std::min(want - planned, kChunkBytes);
        chunk_of[niov] = d.chunks.size() - 1;
        iov[niov++] = {d.chunks.back()->data, n};
        planned += n;
      }
      ssize_t n = readv(c.fd[di], iov, niov);
      const size_t got = n > 0 ? size_t(n) : 0;
      size_t left = got;
      for (int k = 0; k < niov && left > 0; ++k) {
        size_t take = std::min(left, iov[k].iov_len);
        d.chunks[chunk_of[k]]->end += take;
        left -= take;
      }
      // Return the new chunks the read did not reach.
      while (d.chunks.size() > first_new && d.chunks.back()->end == 0) {
        FreeChunk(d.chunks.back());
        d.chunks.pop_back();
      }
      if (n < 0 && errno == EINTR) continue;
      if (n > 0) {
        d.read_total += got;
        total += got;
        const int64_t release = now + delay_ns_[di];
        if (!d.marks.empty() && d.marks.back().release_ns == release) {
          d.marks.back().end = d.read_total;
        } else {
          d.marks.push_back({d.read_total, release});
        }
        if (d.buffered() > peak_local_) {
          peak_local_ = d.buffered();
          peak_buffered_.store(peak_local_, std::memory_order_relaxed);
        }
        // A short read drained the socket and the next arrival is a new edge, unless the FIN
        // came in the same edge as the data: then read on to see it.
        if (got < planned && !d.peer_closed) d.readable = false;
        continue;
      }
      if (n == 0) {
        d.eof_read = true;
        d.eof_release_ns = now + delay_ns_[di];
        d.readable = false;
        break;
      }
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        d.readable = false;
        break;
      }
      // ECONNRESET, ETIMEDOUT, ...: the source is gone.
      d.readable = false;
      *reset = true;
      break;
    }
    return total;
  }

  // Writes released bytes (rate permitting). Returns bytes written; sets *dead if the
  // destination is gone.
  size_t WriteSome(Connection& c, int di, int64_t now, bool* dead) {
    Direction& d = c.dir[di];
    const int dst = c.fd[1 - di];
    while (!d.marks.empty() && d.marks.front().release_ns <= now) {
      d.released_total = d.marks.front().end;
      d.marks.pop_front();
    }
    TokenBucket& bucket = buckets_[c.map * 2 + di];
    size_t total = 0;
    while (d.writable && d.released_total > d.written_total) {
      uint64_t allow = d.released_total - d.written_total;
      if (bucket.rate != 0) {
        bucket.Refill(now);
        allow = std::min<uint64_t>(allow, uint64_t(std::max(0.0, bucket.tokens)));
        if (allow == 0) break;
      }
      iovec iov[kMaxIov];
      int niov = 0;
      size_t planned = 0;
      for (size_t i = 0; i < d.chunks.size() && niov < kMaxIov && planned < allow; ++i) {
        Chunk* ch = d.chunks[i];
        size_t n = std::min<uint64_t>(ch->end - ch->begin, allow - planned);
        if (n == 0) continue;
        iov[niov++] = {ch->data + ch->begin, n};
        planned += n;
      }
      ssize_t n = writev(dst, iov, niov);
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
          d.writable = false;
          break;
        }
        *dead = true;  // EPIPE, ECONNRESET: the destination is gone
        break;
      }
      size_t left = size_t(n);
      d.written_total += left;
      total += left;
      if (bucket.rate != 0) bucket.tokens -= double(left);
      while (left > 0) {
        Chunk* ch = d.chunks.front();
        size_t take = std::min(left, ch->end - ch->begin);
        ch->begin += take;
        left -= take;
        if (ch->begin == ch->end && (d.chunks.size() > 1 || ch->end == kChunkBytes)) {
          FreeChunk(ch);
          d.chunks.pop_front();
        }
      }
      if (size_t(n) < planned) d.writable = false;
    }
    if (total > 0) bytes_[di].fetch_add(total, std::memory_order_relaxed);
    // Next wake-up: the next mark, or the refill that lets released bytes go.
    if (!d.marks.empty()) Schedule(c, di, d.marks.front().release_ns);
    if (d.writable && d.released_total > d.written_total && bucket.rate != 0) {
      double need = std::min<double>(double(d.released_total - d.written_total), 65536.0);
      int64_t wait = int64_t((need - bucket.tokens) * 1e9 / double(bucket.rate)) + 1;
      Schedule(c, di, now + std::max<int64_t>(wait, 1000));
    }
    if (d.eof_read && !d.shut_wr && d.written_total == d.read_total) {
      if (d.eof_release_ns <= now) {
        shutdown(dst, SHUT_WR);
        d.shut_wr = true;
      } else {
        Schedule(c, di, d.eof_release_ns);
      }
    }
    return total;
  }

  void Pump(Connection& c, int64_t now) {
    // Writes first, abort after: bytes read before an RST are released no later than it, and a
    // late wake-up that finds both due must still deliver the bytes.
    bool progress = true;
    while (progress) {
      progress = false;
      for (int di = 0; di < 2; ++di) {
        bool reset = false;
        bool dead = false;
        if (c.abort_ns == kNever && ReadSome(c, di, now, &reset) > 0) progress = true;
        if (reset) {
          // Deliver the RST after the one-way delay, like the bytes before it.
          c.abort_ns = now + delay_ns_[di];
          Schedule(c, 2, c.abort_ns);
        }
        if (!(di == 0 && c.connecting) && WriteSome(c, di, now, &dead) > 0) progress = true;
        if (dead) {
          resets_.fetch_add(1, std::memory_order_relaxed);
          CloseConnection(c, /*abort=*/true, /*erase=*/true);
          return;
        }
      }
    }
    if (c.abort_ns <= now) {
      resets_.fetch_add(1, std::memory_order_relaxed);
      CloseConnection(c, /*abort=*/true, /*erase=*/true);
      return;
    }
    if (c.dir[0].shut_wr && c.dir[1].shut_wr) CloseConnection(c, /*abort=*/false, /*erase=*/true);
  }

  void CloseConnection(Connection& c, bool abort, bool erase) {
    for (int s = 0; s < 2; ++s) {
      if (c.fd[s] < 0) continue;
      if (abort) {
        AbortSocket(c.fd[s]);
      } else {
        close(c.fd[s]);
      }
      c.fd[s] = -1;
    }
    for (Direction& d : c.dir) {
      for (Chunk* ch : d.chunks) FreeChunk(ch);
      d.chunks.clear();
    }
    active_.fetch_sub(1, std::memory_order_relaxed);
    if (erase) conns_.erase(c.id);  // destroys c
  }

  RelayOptions options_;
  int64_t delay_ns_[2] = {0, 0};
  int epoll_fd_ = -1;
  int wake_fd_ = -1;
  int timer_fd_ = -1;
  int64_t timer_armed_ns_ = kNever;
  std::vector<int> listeners_;
  std::vector<SocketAddress> bound_;
  std::vector<TokenBucket> buckets_;  // [map * 2 + direction]
  std::unordered_map<uint64_t, std::unique_ptr<Connection>> conns_;
  std::priority_queue<TimerEntry, std::vector<TimerEntry>, std::greater<>> heap_;
  std::vector<Chunk*> pool_;
  uint64_t next_id_ = 1;
  uint64_t peak_local_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> accepted_{0}, active_{0}, connect_failures_{0}, resets_{0},
      peak_buffered_{0};
  std::atomic<uint64_t> bytes_[2] = {0, 0};
};

DelayRelay::DelayRelay(std::unique_ptr<Loop> loop) : loop_(std::move(loop)) {}
DelayRelay::~DelayRelay() = default;

absl::StatusOr<std::unique_ptr<DelayRelay>> DelayRelay::Create(RelayOptions options) {
  auto loop = std::make_unique<Loop>(std::move(options));
  absl::Status s = loop->Init();
  if (!s.ok()) return s;
  return std::unique_ptr<DelayRelay>(new DelayRelay(std::move(loop)));
}

std::vector<SocketAddress> DelayRelay::ListenAddresses() const { return loop_->bound(); }
void DelayRelay::Run() { loop_->Run(); }
void DelayRelay::Stop() { loop_->Stop(); }
RelayStats DelayRelay::Stats() const { return loop_->Stats(); }

}  // namespace heddle::wan

// File: control/metrics/testing/http_get.h
//
// A minimal HTTP/1.0 GET for the tests that scrape a metrics endpoint (heddled's, heddle-relay's):
// the body of a 200 response from 127.0.0.1:port, or an error.
//
//   absl::StatusOr<std::string> body = heddle::metrics::test_util::HttpGet(port, "/metrics");
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace heddle::metrics::test_util {

// The server closes the connection after the response (HTTP/1.0). A hung server fails the call
// after 10 s instead of hanging the test; a closed socket is an error, not a SIGPIPE.
inline absl::StatusOr<std::string> HttpGet(uint16_t port, const std::string& path) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError("socket");
  timeval timeout{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
  sockaddr_in sin{};
  sin.sin_family = AF_INET;
  sin.sin_port = htons(port);
  sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&sin), sizeof(sin)) != 0) {
    const int err = errno;
    close(fd);
    return absl::UnavailableError(absl::StrCat("connect: ", strerror(err)));
  }
  const std::string req = absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
  if (send(fd, req.data(), req.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(req.size())) {
    close(fd);
    return absl::InternalError("send");
  }
  std::string resp;
  char buf[4096];
  ssize_t n;
  while ((n = recv(fd, buf, sizeof(buf), 0)) > 0) resp.append(buf, n);
  close(fd);
  const size_t body = resp.find("\r\n\r\n");
  if (body == std::string::npos) return absl::InternalError("no HTTP header end: " + resp);
  if (resp.rfind("HTTP/1.", 0) != 0 || resp.find(" 200 ") == std::string::npos ||
      resp.find(" 200 ") > resp.find("\r\n")) {
    return absl::InternalError("not a 200 response: " + resp.substr(0, resp.find("\r\n")));
  }
  return resp.substr(body + 4);
}

}  // namespace heddle::metrics::test_util

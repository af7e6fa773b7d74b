#include "tools/heddle-flow/proposer.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace heddle::flow {

namespace {

absl::Status Errno(const char* what) {
  return absl::InternalError(absl::StrCat("proposer: ", what, ": ", std::strerror(errno)));
}

}  // namespace

absl::StatusOr<CommandResult> RunCommand(const std::string& command, std::string_view input,
                                         double timeout_s, size_t max_output) {
  int in_pipe[2], out_pipe[2];
  if (pipe2(in_pipe, O_CLOEXEC) != 0) return Errno("pipe");
  if (pipe2(out_pipe, O_CLOEXEC) != 0) {
    close(in_pipe[0]);
    close(in_pipe[1]);
    return Errno("pipe");
  }
  const pid_t pid = fork();
  if (pid < 0) {
    for (int fd : {in_pipe[0], in_pipe[1], out_pipe[0], out_pipe[1]}) close(fd);
    return Errno("fork");
  }
  if (pid == 0) {
    setpgid(0, 0);
    dup2(in_pipe[0], STDIN_FILENO);
    dup2(out_pipe[1], STDOUT_FILENO);
    execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  setpgid(pid, pid);  // also here, so the group exists before we might kill it
  close(in_pipe[0]);
  close(out_pipe[1]);
  int to_child = in_pipe[1];
  const int from_child = out_pipe[0];
  fcntl(to_child, F_SETFL, O_NONBLOCK);
  if (input.empty()) {
    close(to_child);
    to_child = -1;
  }
  // A proposer that exits without reading its stdin must not kill us with SIGPIPE.
  struct sigaction ignore {
  }, old{};
  ignore.sa_handler = SIG_IGN;
  sigaction(SIGPIPE, &ignore, &old);

  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(timeout_s));
  CommandResult result;
  size_t written = 0;
  absl::Status failure;
  bool open = true;
  char buf[65536];
  while (open) {
    const auto left = deadline - std::chrono::steady_clock::now();
    if (left <= std::chrono::steady_clock::duration::zero()) {
      failure = absl::DeadlineExceededError(
          absl::StrFormat("proposer: no answer within %gs (killed): %s", timeout_s, command));
      break;
    }
    pollfd fds[2] = {{from_child, POLLIN, 0}, {to_child, POLLOUT, 0}};
    const int n = poll(
        fds, to_child >= 0 ? 2 : 1,
        static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(left).count()) + 1);
    if (n < 0 && errno != EINTR) {
      failure = Errno("poll");
      break;
    }
    if (to_child >= 0 && (fds[1].revents & (POLLOUT | POLLERR | POLLHUP))) {
      const ssize_t w = write(to_child, input.data() + written, input.size() - written);
      if (w > 0) written += static_cast<size_t>(w);
      if (w < 0 && errno != EAGAIN && errno != EINTR) written = input.size();  // EPIPE: it left
      if (written == input.size()) {
        close(to_child);
        to_child = -1;
      }
    }
    if (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) {
      const ssize_t r = read(from_child, buf, sizeof(buf));
      if (r > 0) {
        if (result.out.size() + static_cast<size_t>(r) > max_output) {
          failure = absl::ResourceExhaustedError(
              absl::StrCat("proposer: more than ", max_output, " bytes of output: ", command));
          break;
        }
        result.out.append(buf, static_cast<size_t>(r));
      } else if (r == 0) {
        open = false;
      } else if (errno != EAGAIN && errno != EINTR) {
        failure = Errno("read");
        break;
      }
    }
  }
  if (to_child >= 0) close(to_child);
  close(from_child);
  int status = 0;
  // A command that closed its stdout may still run: it gets what is left of the deadline.
  while (failure.ok()) {
    const pid_t w = waitpid(pid, &status, WNOHANG);
    if (w == pid || (w < 0 && errno != EINTR)) break;
    if (std::chrono::steady_clock::now() >= deadline) {
      failure = absl::DeadlineExceededError(
          absl::StrFormat("proposer: did not exit within %gs (killed): %s", timeout_s, command));
      break;
    }
    usleep(10'000);
  }
  if (!failure.ok()) {
    kill(-pid, SIGKILL);  // the group we made: the shell and what it started
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
  }
  sigaction(SIGPIPE, &old, nullptr);
  if (!failure.ok()) return failure;
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

namespace {

constexpr char kDslSummary[] =
    R"(A program is lines of statements (a `;` also ends one); `#` starts a comment.
  intent NAME                        the program's name (first line)
  collective KIND [chunks K]         allgather | reducescatter | allreduce | broadcast |
                                     reduce | alltoall; K chunks per rank (default 1)
  param NAME = EXPR                  a parameter the search may vary (top level only)
  let x = EXPR                       a local value (names are never shadowed)
  require EXPR "message"             fails the program (for this N) when EXPR is 0
  for v in A..B [step S] { ... }     v = A, A+S, ... while < B (> B for a negative step)
  if EXPR { ... } else { ... }
  copy SLOTS from RANK to RANK       the destination's slots := the source's
  reduce SLOTS from RANK into RANK   the destination's slots := destination + source
SLOTS: all (every slot) | one slot number, e.g. chunk(v, j) (rank v's j-th chunk) |
chunks(R) (the K chunks of rank R, or of each rank in A..B [step S]; allgather,
reducescatter, allreduce) | chunks(S, D) (all-to-all: what S sends D) | slots(A..B).
Expressions: 64-bit integers, N (ranks), K, root (broadcast and reduce), + - * / %
(floor division; % is never negative), ^ & | << >>, comparisons, && || !, log2(x),
clog2(x), pow2(x), min(...), max(...). Rank arithmetic does not wrap by itself: write
(r + 1) % N. A move from a rank to itself is dropped with a warning.
Moves run in program order; a move reads the source as the moves before it left it. Each rank
starts with its own contributions (see the collective) and must end with exactly what the
collective promises, every contribution reduced exactly once. Time, links, channels and
pipelining are the compiler's: say only which data goes where.)";

}  // namespace

std::string BuildPrompt(const PromptParts& p) {
  std::string out = absl::StrCat(
      "# heddle-flow synthesize: proposal ", p.round, " of ", p.rounds, "\n\n",
      "Write data-movement intent in the OptiFlow DSL for the collective below, on the topology "
      "below, so that the compiled schedule finishes sooner than the best so far. Reply with the "
      "program text only.\n\n## The DSL\n",
      kDslSummary, "\n\n## Collective\n", p.collective, "\n\n## Topology (YAML)\n",
      p.topology_yaml);
  if (!out.empty() && out.back() != '\n') out += '\n';
  if (!p.best_name.empty()) {
    absl::StrAppendFormat(&out, "\n## Best so far: %s, predicted %.6g s\n%s", p.best_name,
                          p.best_predicted_s, p.best_text);
    if (!p.best_text.empty() && p.best_text.back() != '\n') out += '\n';
  }
  if (!p.rejected_text.empty() || !p.rejected_diagnostics.empty()) {
    absl::StrAppend(&out, "\n## Your last proposal was rejected\nDiagnostics (JSON):\n",
                    p.rejected_diagnostics, "\nText:\n", p.rejected_text);
    if (!p.rejected_text.empty() && p.rejected_text.back() != '\n') out += '\n';
  }
  return out;
}

std::string ExtractIntentText(std::string_view reply) {
  const size_t open = reply.find("```");
  if (open == std::string_view::npos) return std::string(reply);
  size_t body = reply.find('\n', open);
  if (body == std::string_view::npos) return std::string(reply);
  ++body;
  const size_t close = reply.find("```", body);
  return std::string(
      reply.substr(body, close == std::string_view::npos ? std::string_view::npos : close - body));
}

}  // namespace heddle::flow

// Isolation of an evaluation (see evaluator.h): a forked child with a pipe for its result and
// phase notes, a timeout that kills it, and the choice between fork and an exec'ed worker.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>

#include <nlohmann/json.hpp>

#include "loom/evolve/device.h"
#include "loom/evolve/evaluator.h"
#include "loom/evolve/worker.h"

namespace loom::evolve {

using clock_type = std::chrono::steady_clock;
using kernels::Shape;

namespace {
int g_phase_fd = -1;  // the pipe to the parent, in an isolated child
}

void note_phase(const std::string& phase) {
  if (g_phase_fd < 0) return;
  std::string line = "@phase " + phase + "\n";
  ssize_t w = write(g_phase_fd, line.data(), line.size());
  (void)w;
}

void set_phase_fd(int fd) { g_phase_fd = fd; }

Result<IsolatedChild> fork_with_pipe(const std::function<void(int write_fd)>& in_child) {
  // Close-on-exec: an exec'ed sibling started later must not hold this pipe open (the parent
  // sees end-of-file only when every writer is gone).
  int fd[2];
  if (pipe2(fd, O_CLOEXEC) != 0) return internal_error("pipe: {}", std::strerror(errno));
  std::fflush(stdout);
  std::fflush(stderr);
  pid_t pid = fork();
  if (pid < 0) {
    close(fd[0]);
    close(fd[1]);
    return internal_error("fork: {}", std::strerror(errno));
  }
  if (pid == 0) {
    close(fd[0]);
    in_child(fd[1]);
    _exit(0);
  }
  close(fd[1]);
  IsolatedChild c;
  c.pid = pid;
  c.fd = fd[0];
  return c;
}

Result<IsolatedChild> spawn_isolated(const std::function<std::string()>& fn) {
  return fork_with_pipe([&fn](int wfd) {
    g_phase_fd = wfd;
    std::string out = fn();
    g_phase_fd = -1;
    size_t off = 0;
    while (off < out.size()) {
      ssize_t w = write(wfd, out.data() + off, out.size() - off);
      if (w <= 0) break;
      off += static_cast<size_t>(w);
    }
    close(wfd);
  });
}

Result<std::string> collect(IsolatedChild& c, double timeout_s) {
  auto out = collect_isolated(c.pid, c.fd, timeout_s);
  c.fd = -1;
  if (!c.request_file.empty()) unlink(c.request_file.c_str());
  c.request_file.clear();
  return out;
}

Result<std::string> run_isolated(const std::function<std::string()>& fn, double timeout_s) {
  LOOM_ASSIGN_OR_RETURN(IsolatedChild c, spawn_isolated(fn));
  return collect(c, timeout_s);
}

Result<std::string> collect_isolated(int pid, int read_fd, double timeout_s) {
  std::string out;
  const auto deadline = clock_type::now() + std::chrono::duration<double>(timeout_s);
  bool timed_out = false;
  char buf[65536];
  while (true) {
    double left = std::chrono::duration<double, std::milli>(deadline - clock_type::now()).count();
    if (left <= 0) {
      timed_out = true;
      break;
    }
    pollfd p{read_fd, POLLIN, 0};
    int pr = poll(&p, 1, static_cast<int>(std::min(left, 1000.0)) + 1);
    if (pr < 0 && errno == EINTR) continue;
    if (pr <= 0) continue;
    ssize_t n = read(read_fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  close(read_fd);
  // Phase notes come first, one per line; the result is what follows the last one.
  std::string phase;
  while (out.rfind("@phase ", 0) == 0) {
    size_t e = out.find('\n');
    if (e == std::string::npos) break;
    phase = out.substr(7, e - 7);
    out.erase(0, e + 1);
  }
  const std::string during = phase.empty() ? "" : " during: " + phase;
  if (timed_out) kill(pid, SIGKILL);
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  if (timed_out)
    return Status(StatusCode::kDeadlineExceeded, fmt::format("no result after {:.0f} s: killed;{}", timeout_s, during));
  if (WIFSIGNALED(st))
    return internal_error("the evaluation process died from signal {} ({});{}", WTERMSIG(st), strsignal(WTERMSIG(st)), during);
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) return internal_error("the evaluation process exited with status {};{}", st, during);
  return out;
}

EvalResult evaluate_isolated(const std::string& device_spec, const kernels::OpSpec& op, const Shape& shape,
                             const Candidate& c, const EvalOptions& opt, double timeout_s) {
  const auto t0 = clock_type::now();
  auto out = isolate_by_exec(device_spec)
                 ? (persistent_workers()
                        ? run_in_persistent_worker(device_spec, evaluate_request(device_spec, op, shape, c, opt), timeout_s)
                        : run_worker(evaluate_request(device_spec, op, shape, c, opt), timeout_s))
                 : run_isolated(
                       [&]() -> std::string {
                         const auto t_open = clock_type::now();
                         auto dev = EvalDevice::open(device_spec);
                         if (!dev.ok()) {
                           EvalResult e;
                           e.reason = dev.status().to_string();
                           return e.to_json();
                         }
                         const double open_s = std::chrono::duration<double>(clock_type::now() - t_open).count();
                         EvalResult e = evaluate(**dev, op, shape, c, opt);
                         e.phases = fmt::format("open {:.2f}s, {}", open_s, e.phases);
                         return e.to_json();
                       },
                       timeout_s);
  EvalResult r;
  if (!out.ok()) {
    r.status = out.status().code() == StatusCode::kDeadlineExceeded ? "timeout" : "crash";
    r.reason = out.status().message();
    // Dying on a held-out shape is a shape-specialized kernel, whatever killed it.
    if (size_t p = r.reason.find("during: holdout "); p != std::string::npos) {
      r.reason = "holdout: " + r.status + " on held-out shape " + r.reason.substr(p + 16) + " (" + r.reason.substr(0, p) + ")";
      r.status = "rejected";
    }
  } else {
    r = EvalResult::from_json(*out);
  }
  r.eval_s = std::chrono::duration<double>(clock_type::now() - t0).count();
  return r;
}

}  // namespace loom::evolve

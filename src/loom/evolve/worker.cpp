// The exec'ed evaluation worker (see worker.h): spawning it, its request format, and its main.
#include "loom/evolve/worker.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>

#include <nlohmann/json.hpp>

#include "loom/base/options.h"
#include "loom/evolve/device.h"
#include "loom/store/store.h"
#include "loom/evolve/store_names.h"
#include "loom/evolve/user_op.h"

namespace loom::evolve {
namespace {

// set_worker_binary's value; a function-local static, so it may be set during static init.
struct WorkerName {
  std::mutex mu;
  std::string path;
};
WorkerName& worker_name() {
  static WorkerName w;
  return w;
}

// Facts of an open device as JSON (probe requests, in whichever process opened the device).
std::string probe_json(const std::string& spec, bool measure) {
  auto dev = EvalDevice::open(spec);
  if (!dev.ok()) return nlohmann::json{{"error", dev.status().to_string()}}.dump();
  nlohmann::json j = {{"arch", device_arch_of((*dev)->props())},
                      {"threads", (*dev)->props().worker_threads},
                      {"llc", (*dev)->llc_bytes()}};
  if (measure) {
    auto g = measure_read_gbps(**dev);
    if (!g.ok()) return nlohmann::json{{"error", g.status().to_string()}}.dump();
    j["peak"] = *g;
  }
  return j.dump();
}

std::string error_result(const std::string& reason) {
  EvalResult e;
  e.reason = reason;
  return e.to_json();
}

// Instantiates `c` for every shape and compiles it into the kernel cache: {"ok", "seconds", "error"}.
std::string prebuild_json(const kernels::OpSpec& op, const std::vector<kernels::Shape>& shapes, const Candidate& c,
                          ir::TargetKind target) {
  const auto t0 = std::chrono::steady_clock::now();
  std::string error;
  for (const kernels::Shape& s : shapes) {
    auto inst = instantiate(c, op, s, target);
    Status st = inst.ok() ? prebuild(*inst, target) : inst.status();
    if (!st.ok()) {
      error = fmt::format("{{{}}}: {}", s.key(), st.to_string().substr(0, 400));
      break;
    }
  }
  return nlohmann::json{{"ok", error.empty()},
                        {"seconds", std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()},
                        {"error", error}}
      .dump();
}

nlohmann::json prebuild_request(const kernels::OpSpec& op, const std::vector<kernels::Shape>& shapes, const Candidate& c,
                                ir::TargetKind target) {
  nlohmann::json sh = nlohmann::json::array();
  for (const kernels::Shape& s : shapes) sh.push_back(s.key());
  return {{"task", "prebuild"}, {"op", std::string(op.name())}, {"op_file", op_file_of(op)},
          {"shapes", sh},       {"candidate", c.body()},         {"target", target == ir::TargetKind::kCpp ? "cpp" : "ptx"}};
}

// Devices a persistent worker keeps open between requests, by spec.
using OpenDevices = std::map<std::string, std::unique_ptr<EvalDevice>>;

std::string run_request(const nlohmann::json& req, OpenDevices* keep) {
  const std::string task = req.value("task", "");
  const std::string device = req.value("device", "cpu");
  if (task == "probe") return probe_json(device, req.value("peak", false));
  if (task == "prebuild") {
    auto op = resolve_op(req.value("op", ""), req.value("op_file", ""));
    if (!op.ok()) return nlohmann::json{{"ok", false}, {"error", op.status().to_string()}}.dump();
    auto cand = Candidate::from_body(req.value("candidate", ""));
    if (!cand.ok()) return nlohmann::json{{"ok", false}, {"error", cand.status().to_string()}}.dump();
    std::vector<kernels::Shape> shapes;
    for (const auto& k : req.value("shapes", nlohmann::json::array())) {
      auto s = kernels::Shape::parse(k.get<std::string>());
      if (!s.ok()) return nlohmann::json{{"ok", false}, {"error", s.status().to_string()}}.dump();
      shapes.push_back(std::move(*s));
    }
    return prebuild_json(**op, shapes, *cand, req.value("target", "cpp") == "cpp" ? ir::TargetKind::kCpp : ir::TargetKind::kPtx);
  }
  if (task != "evaluate") return error_result("worker: unknown task '" + task + "'");
  auto op = resolve_op(req.value("op", ""), req.value("op_file", ""));
  if (!op.ok()) return error_result(op.status().to_string());
  auto shape = kernels::Shape::parse(req.value("shape", ""));
  if (!shape.ok()) return error_result(shape.status().to_string());
  auto cand = Candidate::from_body(req.value("candidate", ""));
  if (!cand.ok()) return error_result(cand.status().to_string());
  auto opt = eval_options_from_json(req.value("options", nlohmann::json::object()));
  if (!opt.ok()) return error_result(opt.status().to_string());
  // Opening the device (a CUDA context per worker process) is part of what an evaluation costs;
  // a persistent worker pays it for its first request only.
  std::unique_ptr<EvalDevice> owned;
  EvalDevice* dev = nullptr;
  if (keep)
    if (auto it = keep->find(device); it != keep->end()) dev = it->second.get();
  const bool kept = dev != nullptr;
  const auto t_open = std::chrono::steady_clock::now();
  if (!dev) {
    auto d = EvalDevice::open(device);
    if (!d.ok()) return error_result(d.status().to_string());
    owned = std::move(*d);
    dev = owned.get();
    if (keep) (*keep)[device] = std::move(owned);
  }
  const double open_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_open).count();
  EvalResult r = evaluate(*dev, **op, *shape, *cand, *opt);
  r.phases = kept ? "open 0.00s (kept), " + r.phases : fmt::format("open {:.2f}s, {}", open_s, r.phases);
  return r.to_json();
}

bool write_all(int fd, const std::string& text) {
  size_t off = 0;
  while (off < text.size()) {
    ssize_t w = write(fd, text.data() + off, text.size() - off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    off += static_cast<size_t>(w);
  }
  return true;
}

// A persistent worker's loop: one JSON request per line from fd, answered on the same fd.
int serve(int fd) {
  OpenDevices devices;
  std::string buf;
  char tmp[65536];
  while (true) {
    size_t nl;
    while ((nl = buf.find('\n')) == std::string::npos) {
      ssize_t n = read(fd, tmp, sizeof tmp);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return 0;  // the parent closed its end (done, or it ended this worker)
      buf.append(tmp, static_cast<size_t>(n));
    }
    auto req = nlohmann::json::parse(std::string_view(buf).substr(0, nl), nullptr, false);
    buf.erase(0, nl + 1);
    set_phase_fd(fd);
    std::string out = req.is_discarded() ? error_result("worker: unreadable request") : run_request(req, &devices);
    set_phase_fd(-1);
    if (!write_all(fd, fmt::format("@result {}\n", out.size()) + out)) return 1;
  }
}

// The parent's side of persistent workers.
struct Persistent {
  int pid = -1;
  int fd = -1;  // our end of the socket
};
struct Persistents {
  std::mutex mu;
  std::map<std::string, Persistent> by_spec;
};
Persistents& persistents() {
  static Persistents* p = new Persistents;  // never destroyed: workers end when this process's end of the socket closes
  return *p;
}

void end_worker(Persistent& w) {
  if (w.pid > 0) kill(w.pid, SIGKILL);
  if (w.fd >= 0) close(w.fd);
  if (w.pid > 0)
    while (waitpid(w.pid, nullptr, 0) < 0 && errno == EINTR) {
    }
  w = Persistent{};
}

Result<Persistent> spawn_persistent() {
  const std::string bin = worker_binary();
  if (bin.empty()) return failed_precondition("no evolve worker binary (set LOOM_EVOLVE_WORKER to a loom binary)");
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return internal_error("socketpair: {}", std::strerror(errno));
  // Everything the child needs is built before fork: between fork and exec only
  // async-signal-safe calls (the parent may have threads).
  std::vector<std::string> args = {bin, "evolve", "worker", "@serve", "--fd", "3"};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const std::string failed_body = "{\"status\":\"error\",\"reason\":\"cannot exec the evolve worker binary\"}";
  const std::string failed = fmt::format("@result {}\n", failed_body.size()) + failed_body;
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = fork();
  if (pid < 0) {
    close(sv[0]);
    close(sv[1]);
    return internal_error("fork: {}", std::strerror(errno));
  }
  if (pid == 0) {
    if (sv[1] == 3) fcntl(3, F_SETFD, 0);
    else if (dup2(sv[1], 3) < 0) _exit(127);
    execv(argv[0], argv.data());
    // No request is read: answer the first one with the error, then end.
    ssize_t w = write(3, failed.data(), failed.size());
    (void)w;
    _exit(0);
  }
  close(sv[1]);
  return Persistent{pid, sv[0]};
}

bool send_all(int fd, const std::string& text) {
  size_t off = 0;
  while (off < text.size()) {
    ssize_t w = send(fd, text.data() + off, text.size() - off, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    off += static_cast<size_t>(w);
  }
  return true;
}

}  // namespace

void set_worker_binary(std::string path) {
  WorkerName& w = worker_name();
  std::lock_guard<std::mutex> lock(w.mu);
  w.path = std::move(path);
}

std::string worker_binary() {
  if (std::string e = opt::get_string(opt::Opt::kEvolveWorker); !e.empty()) return e;
  WorkerName& w = worker_name();
  std::lock_guard<std::mutex> lock(w.mu);
  return w.path;
}

bool isolate_by_exec(const std::string& device_spec) {
  if (worker_binary().empty()) return false;
  const std::string how = opt::get_string(opt::Opt::kEvolveIsolation);
  if (how != "auto") return how == "exec";
  return device_spec.rfind("cpu", 0) != 0;
}

nlohmann::json eval_options_to_json(const EvalOptions& o) {
  nlohmann::json hold = nlohmann::json::array();
  for (const kernels::Shape& s : o.holdout) hold.push_back(s.key());
  return {{"trials", o.trials},       {"holdout", hold},
          {"time", o.time},           {"time_budget_s", o.time_budget_s},
          {"min_reps", o.min_reps},   {"max_reps", o.max_reps},
          {"ws_factor", o.ws_factor}, {"peak_gbps", o.peak_gbps},
          {"floor_margin", o.floor_margin}, {"seed", o.seed},
          {"instrument", o.instrument}, {"fresh_trials", o.fresh_trials},
          {"pool_seed", o.pool_seed}, {"pool_dir", o.pool_dir}, {"exact", o.exact}};
}

Result<EvalOptions> eval_options_from_json(const nlohmann::json& j) {
  EvalOptions o;
  if (!j.is_object()) return invalid_argument("evaluation options: expected an object");
  o.trials = j.value("trials", o.trials);
  for (const auto& h : j.value("holdout", nlohmann::json::array())) {
    LOOM_ASSIGN_OR_RETURN(kernels::Shape s, kernels::Shape::parse(h.get<std::string>()));
    o.holdout.push_back(std::move(s));
  }
  o.time = j.value("time", o.time);
  o.time_budget_s = j.value("time_budget_s", o.time_budget_s);
  o.min_reps = j.value("min_reps", o.min_reps);
  o.max_reps = j.value("max_reps", o.max_reps);
  o.ws_factor = j.value("ws_factor", o.ws_factor);
  o.peak_gbps = j.value("peak_gbps", o.peak_gbps);
  o.floor_margin = j.value("floor_margin", o.floor_margin);
  o.seed = j.value("seed", o.seed);
  o.instrument = j.value("instrument", o.instrument);
  o.fresh_trials = j.value("fresh_trials", o.fresh_trials);
  o.pool_seed = j.value("pool_seed", o.pool_seed);
  o.pool_dir = j.value("pool_dir", o.pool_dir);
  o.exact = j.value("exact", o.exact);
  return o;
}

nlohmann::json evaluate_request(const std::string& device_spec, const kernels::OpSpec& op, const kernels::Shape& shape,
                                const Candidate& c, const EvalOptions& opt) {
  return {{"task", "evaluate"},         {"device", device_spec},     {"op", std::string(op.name())},
          {"op_file", op_file_of(op)}, {"shape", shape.key()},      {"candidate", c.body()},
          {"options", eval_options_to_json(opt)}};
}

Result<IsolatedChild> spawn_worker(const nlohmann::json& request) {
  const std::string bin = worker_binary();
  if (bin.empty()) return failed_precondition("no evolve worker binary (set LOOM_EVOLVE_WORKER to a loom binary)");
  std::string path = opt::get_string(opt::Opt::kTmpdir) + "/loom-evolve-req-XXXXXX";
  int tfd = mkstemp(path.data());
  if (tfd < 0) return unavailable("cannot create a request file {}: {}", path, std::strerror(errno));
  const std::string text = request.dump();
  size_t off = 0;
  while (off < text.size()) {
    ssize_t w = write(tfd, text.data() + off, text.size() - off);
    if (w <= 0) break;
    off += static_cast<size_t>(w);
  }
  close(tfd);
  if (off != text.size()) {
    unlink(path.c_str());
    return unavailable("cannot write the request file {}", path);
  }
  // Everything the child needs is built before fork: between fork and exec only
  // async-signal-safe calls (the parent may have threads).
  std::vector<std::string> args = {bin, "evolve", "worker", path, "--fd", "3"};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  static constexpr char kExecFailed[] = "{\"status\":\"error\",\"reason\":\"cannot exec the evolve worker binary\"}";
  auto kid = fork_with_pipe([&argv](int wfd) {
    if (wfd == 3) {
      fcntl(3, F_SETFD, 0);
    } else if (dup2(wfd, 3) < 0) {
      _exit(127);
    }
    execv(argv[0], argv.data());
    ssize_t w = write(3, kExecFailed, sizeof kExecFailed - 1);
    (void)w;
    _exit(0);
  });
  if (!kid.ok()) {
    unlink(path.c_str());
    return std::move(kid).status();
  }
  kid->request_file = path;
  return kid;
}

bool persistent_workers() {
  return opt::get_bool(opt::Opt::kEvolvePersistent);
}

Result<std::string> run_in_persistent_worker(const std::string& device_spec, const nlohmann::json& request,
                                             double timeout_s) {
  Persistents& ps = persistents();
  std::lock_guard<std::mutex> lock(ps.mu);
  Persistent& w = ps.by_spec[device_spec];
  const std::string line = request.dump() + "\n";
  // A kept worker may have died while idle: then the request goes to a fresh one.
  bool sent = false;
  for (int attempt = 0; attempt < 2 && !sent; ++attempt) {
    if (w.pid < 0) {
      LOOM_ASSIGN_OR_RETURN(w, spawn_persistent());
    }
    sent = send_all(w.fd, line);
    if (!sent) end_worker(w);
  }
  if (!sent) return internal_error("cannot send a request to the evolve worker");
  // Phase notes, then "@result N\n" and N bytes; a timeout or end-of-file as collect_isolated.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  std::string in, phase, result;
  bool timed_out = false, done = false;
  char buf[65536];
  while (!done) {
    const double left = std::chrono::duration<double, std::milli>(deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0) {
      timed_out = true;
      break;
    }
    pollfd p{w.fd, POLLIN, 0};
    const int pr = poll(&p, 1, static_cast<int>(std::min(left, 1000.0)) + 1);
    if (pr <= 0) continue;
    const ssize_t n = recv(w.fd, buf, sizeof buf, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    in.append(buf, static_cast<size_t>(n));
    while (true) {
      const size_t e = in.find('\n');
      if (e == std::string::npos) break;
      if (in.rfind("@phase ", 0) == 0) {
        phase = in.substr(7, e - 7);
        in.erase(0, e + 1);
        continue;
      }
      if (in.rfind("@result ", 0) == 0) {
        const size_t len = static_cast<size_t>(std::strtoull(in.c_str() + 8, nullptr, 10));
        if (in.size() - (e + 1) >= len) {
          result = in.substr(e + 1, len);
          done = true;
        }
      }
      break;
    }
  }
  const std::string during = phase.empty() ? "" : " during: " + phase;
  if (timed_out) {
    end_worker(w);
    return Status(StatusCode::kDeadlineExceeded, fmt::format("no result after {:.0f} s: killed;{}", timeout_s, during));
  }
  if (!done) {  // end of file: the worker died
    close(w.fd);
    int st = 0;
    while (waitpid(w.pid, &st, 0) < 0 && errno == EINTR) {
    }
    w = Persistent{};
    if (WIFSIGNALED(st))
      return internal_error("the evaluation process died from signal {} ({});{}", WTERMSIG(st), strsignal(WTERMSIG(st)), during);
    return internal_error("the evaluation process exited with status {};{}", st, during);
  }
  // Kept only after a passed evaluation: a rejected candidate may have written outside its
  // buffers, an error may be a sticky device fault; the next candidate must not inherit either.
  auto j = nlohmann::json::parse(result, nullptr, false);
  if (j.is_discarded() || !j.is_object() || j.value("status", "") != "ok") end_worker(w);
  return result;
}

int persistent_worker_pid(const std::string& device_spec) {
  Persistents& ps = persistents();
  std::lock_guard<std::mutex> lock(ps.mu);
  auto it = ps.by_spec.find(device_spec);
  return it == ps.by_spec.end() ? -1 : it->second.pid;
}

void stop_persistent_workers() {
  Persistents& ps = persistents();
  std::lock_guard<std::mutex> lock(ps.mu);
  for (auto& [spec, w] : ps.by_spec) end_worker(w);
  ps.by_spec.clear();
}

Result<std::string> run_worker(const nlohmann::json& request, double timeout_s) {
  LOOM_ASSIGN_OR_RETURN(IsolatedChild c, spawn_worker(request));
  return collect(c, timeout_s);
}

int worker_main(const std::string& path, int fd) {
  // A parent that dies must not leave this process writing into a closed pipe forever.
  signal(SIGPIPE, SIG_DFL);
  if (path == "@serve") return serve(fd);
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  auto req = nlohmann::json::parse(ss.str(), nullptr, false);
  set_phase_fd(fd);
  std::string out = req.is_discarded() ? error_result("worker: unreadable request " + path) : run_request(req, nullptr);
  set_phase_fd(-1);
  size_t off = 0;
  while (off < out.size()) {
    ssize_t w = write(fd, out.data() + off, out.size() - off);
    if (w <= 0) return 1;
    off += static_cast<size_t>(w);
  }
  close(fd);
  return 0;
}

std::vector<PrebuildResult> prebuild_parallel(const std::string& device_spec, const kernels::OpSpec& op,
                                              const std::vector<kernels::Shape>& shapes,
                                              const std::vector<Candidate>& cands, ir::TargetKind target, int jobs,
                                              double timeout_s) {
  std::vector<PrebuildResult> out(cands.size());
  if (target != ir::TargetKind::kCpp) return out;  // nothing to compile ahead (see prebuild)
  const bool by_exec = isolate_by_exec(device_spec);
  jobs = std::max(1, jobs);
  for (size_t wave = 0; wave < cands.size(); wave += static_cast<size_t>(jobs)) {
    const size_t end = std::min(cands.size(), wave + static_cast<size_t>(jobs));
    std::vector<Result<IsolatedChild>> kids;
    for (size_t i = wave; i < end; ++i) {
      const Candidate& c = cands[i];
      kids.push_back(by_exec ? spawn_worker(prebuild_request(op, shapes, c, target))
                             : spawn_isolated([&op, &shapes, &c, target] { return prebuild_json(op, shapes, c, target); }));
    }
    for (size_t i = wave; i < end; ++i) {
      Result<IsolatedChild>& kid = kids[i - wave];
      PrebuildResult& r = out[i];
      if (!kid.ok()) {
        r.error = kid.status().to_string();
        continue;
      }
      auto text = collect(*kid, timeout_s);
      if (!text.ok()) {
        r.error = text.status().to_string();
        continue;
      }
      auto j = nlohmann::json::parse(*text, nullptr, false);
      if (j.is_discarded() || !j.is_object()) {
        r.error = "the compile process returned no result";
        continue;
      }
      r.ok = j.value("ok", false);
      r.seconds = j.value("seconds", 0.0);
      r.error = j.value("error", "");
    }
  }
  return out;
}

Result<DeviceFacts> probe_device(const std::string& spec, bool measure_peak, double timeout_s) {
  Result<std::string> out = isolate_by_exec(spec)
                                ? run_worker({{"task", "probe"}, {"device", spec}, {"peak", measure_peak}}, timeout_s)
                                : run_isolated([&] { return probe_json(spec, measure_peak); }, timeout_s);
  if (!out.ok()) return std::move(out).status();
  auto j = nlohmann::json::parse(*out, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return internal_error("device probe returned '{}'", *out);
  if (j.contains("error")) return unavailable("{}", j["error"].get<std::string>());
  DeviceFacts f;
  f.arch = j.value("arch", "");
  f.threads = j.value("threads", 0);
  f.llc = j.value("llc", uint64_t{0});
  f.peak_gbps = j.value("peak", 0.0);
  return f;
}

}  // namespace loom::evolve

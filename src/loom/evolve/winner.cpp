// A job's winner record (see winner.h).
#include "loom/evolve/winner.h"

#include <algorithm>

#include "loom/base/version.h"
#include "loom/store/db.h"
#include "loom/evolve/store_names.h"

namespace loom::evolve {

double Winner::claim() const {
  return rounds > 0 ? std::min(confirmed_speedup, search_speedup) : search_speedup;
}

std::string Winner::line() const {
  std::string out;
  if (seq == 0) {
    out = fmt::format("#0, the baseline (no candidate was faster at search time): {:.1f} us", search_us);
  } else if (rounds > 0) {
    out = fmt::format("#{} (candidate {}): {:.1f} us vs the baseline's {:.1f} us, re-timed in {} interleaved rounds: "
                      "{:.2f}x (search {:.2f}x)",
                      seq, candidate, median_us, baseline_us, rounds, confirmed_speedup, search_speedup);
  } else {
    out = fmt::format("#{} (candidate {}): {:.2f}x at search time, {:.1f} us ({})", seq, candidate, search_speedup,
                      search_us, final ? "its re-timing failed" : "the best so far, not re-timed yet");
  }
  if (!final || seq == 0) return out;
  if (!kernel.empty()) return out + fmt::format("; stored as {} at {:.2f}x", kernel, claim());
  return out + "; not stored";
}

Result<std::optional<Winner>> read_winner(Db& db, int64_t job) {
  LOOM_ASSIGN_OR_RETURN(Stmt s, db.prepare("SELECT j.best_candidate, c.seq, c.body, c.speedup, c.median_us, "
                                           "j.confirmed_rounds, j.confirmed_speedup, j.confirmed_us, "
                                           "j.confirmed_baseline_us, j.stored_kernel, j.status FROM jobs j JOIN "
                                           "candidates c ON c.id = j.best_candidate AND c.job = j.id WHERE j.id = ?1"));
  s.bind(1, job);
  LOOM_ASSIGN_OR_RETURN(bool has, s.step());
  if (!has) return std::optional<Winner>();
  Winner w;
  w.job = job;
  w.candidate = s.i64(0);
  w.seq = static_cast<int>(s.i64(1));
  if (auto c = Candidate::from_body(s.text(2)); c.ok()) w.cand = *c;
  w.search_speedup = s.f64(3);
  w.search_us = s.f64(4);
  w.rounds = static_cast<int>(s.i64(5));
  w.confirmed_speedup = s.f64(6);
  w.median_us = s.f64(7);
  w.baseline_us = s.f64(8);
  w.kernel = s.text(9);
  w.final = !s.is_null(5) || s.text(10) == "done";  // confirmed_rounds: written by record_winner only
  return std::optional<Winner>(std::move(w));
}

Result<Winner> search_winner(Db& db, int64_t job, int64_t candidate) {
  LOOM_ASSIGN_OR_RETURN(Stmt s, db.prepare("SELECT c.seq, c.body, c.speedup, c.median_us, j.baseline_us FROM candidates c "
                                           "JOIN jobs j ON j.id = c.job WHERE c.id = ?1 AND c.job = ?2"));
  s.bind(1, candidate).bind(2, job);
  LOOM_ASSIGN_OR_RETURN(bool has, s.step());
  if (!has) return not_found("job {} has no candidate {}", job, candidate);
  Winner w;
  w.job = job;
  w.candidate = candidate;
  w.seq = static_cast<int>(s.i64(0));
  LOOM_ASSIGN_OR_RETURN(w.cand, Candidate::from_body(s.text(1)));
  w.search_speedup = s.f64(2);
  w.search_us = w.median_us = s.f64(3);
  w.baseline_us = s.f64(4);
  return w;
}

StoredKernel stored_kernel_of(const Winner& w, const std::string& op, const kernels::Shape& shape,
                              const std::string& device_arch) {
  StoredKernel k;
  k.op = op;
  k.shape_key = shape.key();
  k.shape_class = shape_class(op, shape);
  k.device_arch = device_arch;
  k.loom_version = std::string(loom_version());
  k.cand = w.cand;
  k.speedup = w.claim();
  k.median_us = w.rounds > 0 ? w.median_us : w.search_us;
  k.baseline_us = w.baseline_us;
  k.job = w.job;
  k.candidate = w.candidate;
  k.seq = w.seq;
  return k;
}

Status record_winner(Db& db, Winner w, const StoredKernel* k) {
  LOOM_ASSIGN_OR_RETURN(Transaction tx, Transaction::begin(db));
  w.kernel = k ? k->id() : "";
  if (k) LOOM_RETURN_IF_ERROR(put_kernel(db, *k));
  LOOM_ASSIGN_OR_RETURN(Stmt u, db.prepare("UPDATE jobs SET best_candidate = ?2, confirmed_rounds = ?3, "
                                           "confirmed_speedup = ?4, confirmed_us = ?5, confirmed_baseline_us = ?6, "
                                           "stored_kernel = ?7 WHERE id = ?1"));
  u.bind(1, w.job).bind(2, w.candidate).bind(3, w.rounds);
  if (w.rounds > 0 || w.seq == 0) u.bind(4, w.seq == 0 ? 1.0 : w.confirmed_speedup);
  else u.bind_null(4);
  u.bind(5, w.median_us).bind(6, w.baseline_us).bind(7, w.kernel);
  LOOM_RETURN_IF_ERROR(u.run());
  return tx.commit();
}

}  // namespace loom::evolve

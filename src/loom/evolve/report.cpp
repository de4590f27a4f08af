// HTML report of a job (see report.h).
#include "loom/evolve/report.h"

#include <algorithm>
#include <map>
#include <optional>
#include <vector>

#include <nlohmann/json.hpp>

#include "loom/store/candidate.h"
#include "loom/store/db.h"
#include "loom/evolve/store_names.h"
#include "loom/evolve/lease.h"
#include "loom/evolve/report_charts.h"
#include "loom/evolve/user_op.h"
#include "loom/evolve/winner.h"
#include "loom/kernels/op_spec.h"

namespace loom::evolve {
namespace {

using report::esc;
using report::Row;

// The op's cost at `shape` for a job's op (built-in or from its op file); nullopt when the op or
// shape no longer resolves (an op file moved away).
std::optional<kernels::Cost> job_cost(const std::string& op, const std::string& op_file, const std::string& shape) {
  auto spec = resolve_op(op, op_file);
  auto sh = kernels::Shape::parse(shape);
  if (!spec.ok() || !sh.ok()) return std::nullopt;
  return (*spec)->cost(*sh);
}

std::string op_file_of_config(const std::string& config) {
  auto cfg = nlohmann::json::parse(config, nullptr, false);
  return cfg.is_object() ? cfg.value("op_file", "") : "";
}

// The roofline of the job's device key: its baseline, its fastest candidates and its winner,
// with the winners of other jobs timed on the same key. Jobs on other keys are counted, never drawn.
Result<std::string> roofline_section(Db& db, int64_t job, const std::string& op, const std::string& op_file,
                                     const std::string& shape, const std::string& arch, const std::vector<Row>& rows,
                                     const Row* winner) {
  double peak = 0;
  std::string peak_key;
  {
    LOOM_ASSIGN_OR_RETURN(Stmt p, db.prepare("SELECT read_gbps, device_arch, method FROM device_peaks WHERE device_arch LIKE ?1 || ':t%' "
                                             "ORDER BY measured DESC"));
    p.bind(1, arch);
    LOOM_ASSIGN_OR_RETURN(bool hp, p.step());
    if (hp) peak = p.f64(0), peak_key = p.text(1) + ": " + p.text(2);
  }
  std::vector<report::RoofPoint> pts;
  if (auto cost = job_cost(op, op_file, shape)) {
    auto add = [&](const Row& r, const std::string& role) {
      pts.push_back({fmt::format("#{}", r.seq), role, job, r.seq, cost->flops, cost->bytes, r.median});
    };
    if (!rows.empty() && rows.front().status == "ok") add(rows.front(), "baseline");
    std::vector<const Row*> ok;
    for (const Row& r : rows)
      if (r.status == "ok" && r.seq != 0 && &r != winner) ok.push_back(&r);
    std::sort(ok.begin(), ok.end(), [](const Row* a, const Row* b) { return a->speedup > b->speedup; });
    for (size_t i = 0; i < ok.size() && i < 5; ++i) add(*ok[i], "candidate");
    if (winner && winner->seq != 0) add(*winner, "winner");
    else if (winner && !pts.empty()) pts.front().role = "winner";  // nothing beat the baseline
  }
  LOOM_ASSIGN_OR_RETURN(Stmt o, db.prepare("SELECT id, op, shape, config, device_arch FROM jobs WHERE id != ?1 AND "
                                           "best_candidate IS NOT NULL ORDER BY id"));
  o.bind(1, job);
  struct Other {
    int64_t id;
    std::string op, shape, config, arch;
  };
  std::vector<Other> others;
  while (true) {
    LOOM_ASSIGN_OR_RETURN(bool h, o.step());
    if (!h) break;
    others.push_back({o.i64(0), o.text(1), o.text(2), o.text(3), o.text(4)});
  }
  std::map<std::string, int> elsewhere;
  for (const Other& j : others) {
    if (j.arch != arch) {
      ++elsewhere[j.arch];
      continue;
    }
    LOOM_ASSIGN_OR_RETURN(std::optional<Winner> w, read_winner(db, j.id));
    auto cost = job_cost(j.op, op_file_of_config(j.config), j.shape);
    if (!w || !cost) continue;
    pts.push_back({fmt::format("job {} {} {{{}}} #{}", j.id, j.op, j.shape, w->seq), "other-job", j.id, w->seq, cost->flops,
                   cost->bytes, w->search_us});
  }
  std::string html = report::roofline_html(arch, peak_key, peak, pts);
  if (!elsewhere.empty()) {
    html += "<p>Not drawn here (another device key: other hardware, driver or peak):";
    for (const auto& [key, n] : elsewhere) html += fmt::format(" {} job(s) on {};", n, esc(key));
    html.back() = '.';
    html += "</p>";
  }
  return html;
}

}  // namespace

Result<std::string> job_report_html(Db& db, int64_t job) {
  LOOM_ASSIGN_OR_RETURN(Stmt js, db.prepare("SELECT op, shape, device, device_arch, strategy, synth, seed, budget, elapsed_s, "
                                            "baseline_us, confirmed_speedup, status, regions, config FROM jobs WHERE id = ?1"));
  js.bind(1, job);
  LOOM_ASSIGN_OR_RETURN(bool has, js.step());
  if (!has) return not_found("no job {} in {}", job, db.path());
  const std::string op = js.text(0), shape = js.text(1), device = js.text(2), arch = js.text(3), strategy = js.text(4),
                    synth = js.text(5), budget = js.text(7), regions = js.text(12), op_file = op_file_of_config(js.text(13));
  const int64_t seed = js.i64(6);
  const double elapsed = js.f64(8), baseline = js.f64(9);
  js = Stmt();  // no statement stays open across the reads below (docs/evolve.md, "Job state")
  LOOM_ASSIGN_OR_RETURN(const std::string state, job_state(db, job));
  std::vector<Row> rows;
  {
    LOOM_ASSIGN_OR_RETURN(Stmt s, db.prepare("SELECT id, seq, parent, synth, kind, body, diff, status, reason, diagnosis, median_us, "
                                             "speedup, gbps, frac_peak, at_s, confirmed_speedup, worker FROM candidates WHERE job = ?1 "
                                             "ORDER BY seq"));
    s.bind(1, job);
    while (true) {
      LOOM_ASSIGN_OR_RETURN(bool hr, s.step());
      if (!hr) break;
      rows.push_back({s.i64(0), s.i64(1), s.i64(2), s.text(3), s.text(4), s.text(5), s.text(6), s.text(7), s.text(8), s.text(9),
                      s.f64(10), s.f64(11), s.f64(12), s.f64(13), s.f64(14), s.f64(15), s.text(16)});
    }
  }
  // The winner is the job's record (winner.h), as `loom evolve status` and the store have it;
  // the search's fastest sample is named beside it when that is another candidate.
  LOOM_ASSIGN_OR_RETURN(std::optional<Winner> winner, read_winner(db, job));
  const int64_t winner_id = winner.has_value() ? winner.value().candidate : -1;
  const Row* best = nullptr;
  const Row* fastest = nullptr;
  for (const Row& r : rows) {
    if (r.id == winner_id) best = &r;
    if (r.status == "ok" && (!fastest || r.speedup > fastest->speedup)) fastest = &r;
  }
  LOOM_ASSIGN_OR_RETURN(const std::string roof, roofline_section(db, job, op, op_file, shape, arch, rows, best));

  std::string html = "<!DOCTYPE html><html><head><meta charset='utf-8'><title>loom evolve job " + std::to_string(job) +
                     "</title><style>body{font-family:sans-serif;max-width:1000px;margin:auto}table{border-collapse:collapse;"
                     "font-size:12px}td,th{border:1px solid #ccc;padding:2px 5px}pre{background:#f6f6f6;padding:8px;"
                     "overflow-x:auto;font-size:11px}.rej{color:#a00}</style></head><body>";
  html += fmt::format("<h1>evolve job {}: {} {{{}}}</h1><p>device {} ({}), strategy {}, synthesizer {}, seed {}, budget {}; "
                      "{} evaluations in {:.0f} s; baseline (default schedule) {:.1f} us; status {}.</p>",
                      job, esc(op), esc(shape), esc(device), esc(arch), esc(strategy), esc(synth), seed, esc(budget),
                      rows.size(), elapsed, baseline, esc(state));
  if (winner && best) {
    html += fmt::format("<p><b>{}: {}</b> ({:.1f} GB/s at search time).</p>", winner->final ? "Winner" : "Best so far",
                        esc(winner->line()), best->gbps);
    if (fastest && fastest != best)
      html += fmt::format("<p>The search's fastest sample was #{} at {:.2f}x{}.</p>", fastest->seq, fastest->speedup,
                          fastest->confirmed > 0 ? fmt::format(", re-timed at {:.2f}x", fastest->confirmed) : "");
  }
  html += report::search_over_evaluations_html(rows, baseline);
  html += "<h2>Search over time</h2><p>Dots: candidates that passed (blue: mutate, orange: llm), at their speed-up over the "
          "baseline, at the second of the search they were recorded; red x: failed; green: best so far.</p>" +
          report::search_over_time_svg(rows);
  html += roof;
  html += report::rejections_html(rows);
  if (best) {
    html += "<h2>Winning kernel</h2><pre>" + esc(best->body) + "</pre><p>" + esc(best->diagnosis) + "</p>";
    if (!regions.empty())
      html += "<p><b>Where its time goes</b> (Loom IR instrumentation pass: cycle counters around its regions): " +
              esc(regions) + "</p>";
    auto c = Candidate::from_body(best->body);
    auto ops = resolve_op(op, op_file);
    auto sh = kernels::Shape::parse(shape);
    if (c.ok() && ops.ok() && sh.ok()) {
      auto inst = instantiate(*c, **ops, *sh, arch.rfind("cuda", 0) == 0 ? ir::TargetKind::kPtx : ir::TargetKind::kCpp);
      if (inst.ok() && (inst->kind == CandKind::kSchedule || inst->kind == CandKind::kIr))
        html += "<details><summary>its Loom IR</summary><pre>" + esc(ir::print(inst->gen.module)) + "</pre></details>";
    }
  }
  html += "<h2>All candidates</h2><table class='all'><tr><th>#</th><th>parent</th><th>synth</th><th>worker</th><th>change</th>"
          "<th>status</th><th>us</th><th>speed-up</th><th>re-timed</th><th>GB/s</th><th>reason / diagnosis</th></tr>";
  for (const Row& r : rows) {
    std::string parent_seq = "-";
    for (const Row& p : rows)
      if (p.id == r.parent) parent_seq = std::to_string(p.seq);
    html += fmt::format("<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class='{}'>{}</td><td>{:.1f}</td>"
                        "<td>{:.2f}</td><td>{}</td><td>{:.1f}</td><td>{}</td></tr>",
                        r.seq, parent_seq, esc(r.synth), esc(r.worker), esc(r.kind == "schedule" ? r.diff : r.kind + " text"),
                        r.status == "ok" ? "" : "rej", esc(r.status), r.median, r.speedup,
                        r.confirmed > 0 ? fmt::format("{:.2f}", r.confirmed) : "", r.gbps,
                        esc(r.status == "ok" ? r.diagnosis : r.reason.substr(0, 300)));
  }
  html += "</table></body></html>\n";
  return html;
}

}  // namespace loom::evolve

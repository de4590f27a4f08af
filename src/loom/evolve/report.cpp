// HTML report of a job (see report.h).
#include "loom/evolve/report.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include <nlohmann/json.hpp>

#include "loom/store/candidate.h"
#include "loom/store/db.h"
#include "loom/evolve/store_names.h"
#include "loom/evolve/lease.h"
#include "loom/evolve/user_op.h"
#include "loom/evolve/winner.h"
#include "loom/kernels/op_spec.h"

namespace loom::evolve {
namespace {

std::string esc(std::string_view s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '&': o += "&amp;"; break;
      case '"': o += "&quot;"; break;
      default: o += c;
    }
  }
  return o;
}

struct Row {
  int64_t id, seq, parent;
  std::string synth, kind, body, diff, status, reason, diagnosis;
  double median, speedup, gbps, frac, at;
  double confirmed;  // re-timed speed-up of a finalist; 0: not re-timed
  std::string worker;  // host:pid of the queue worker that evaluated it; "" in a one-process job
};

// Best speed-up against evaluations, one step line per queue worker (each worker's own best so
// far over the job's evaluation count), with a table of evaluations per worker. Empty for a job
// that evaluated in its own process.
std::string per_worker_html(const std::vector<Row>& rows) {
  std::vector<std::string> workers;
  for (const Row& r : rows)
    if (!r.worker.empty() && std::find(workers.begin(), workers.end(), r.worker) == workers.end()) workers.push_back(r.worker);
  if (workers.empty()) return "";
  static constexpr const char* kColors[] = {"#36c", "#c60", "#090", "#909", "#099", "#c03", "#660", "#333"};
  const double W = 760, H = 260, L = 50, B = 30, T = 10, R = 10;
  double smax = 1.2;
  for (const Row& r : rows) smax = std::max(smax, r.speedup * 1.1);
  const double n = std::max<double>(1, static_cast<double>(rows.size()));
  auto X = [&](double i) { return L + (W - L - R) * i / n; };
  auto Y = [&](double sp) { return H - B - (H - B - T) * sp / smax; };
  std::string svg = fmt::format("<svg xmlns='http://www.w3.org/2000/svg' width='{}' height='{}' font-size='11'>", W, H);
  svg += fmt::format("<line x1='{}' y1='{}' x2='{}' y2='{}' stroke='#000'/><line x1='{}' y1='{}' x2='{}' y2='{}' stroke='#000'/>",
                     L, H - B, W - R, H - B, L, T, L, H - B);
  for (double g = 0; g <= smax; g += smax > 3 ? 1 : 0.25)
    svg += fmt::format("<line x1='{}' y1='{:.1f}' x2='{}' y2='{:.1f}' stroke='#ddd'/><text x='5' y='{:.1f}'>{:.2f}x</text>", L,
                       Y(g), W - R, Y(g), Y(g) + 4, g);
  svg += fmt::format("<text x='{}' y='{}'>evaluations (0 .. {})</text>", W / 2 - 50, H - 8, rows.size());
  std::string table = "<table><tr><th>worker</th><th>evaluations</th><th>passed</th><th>best</th></tr>";
  for (size_t w = 0; w < workers.size(); ++w) {
    const char* color = kColors[w % std::size(kColors)];
    std::string path;
    double best = 0;
    int evals = 0, ok = 0;
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      if (r.worker != workers[w]) continue;
      ++evals;
      if (r.status != "ok") continue;
      ++ok;
      svg += fmt::format("<circle cx='{:.1f}' cy='{:.1f}' r='3' fill='{}'><title>#{} on {}: {:.2f}x</title></circle>",
                         X(static_cast<double>(i)), Y(r.speedup), color, r.seq, esc(workers[w]), r.speedup);
      if (r.speedup > best) {
        path += fmt::format("{}{:.1f},{:.1f} L{:.1f},{:.1f} ", path.empty() ? "M" : "L", X(static_cast<double>(i)),
                            Y(best ? best : r.speedup), X(static_cast<double>(i)), Y(r.speedup));
        best = r.speedup;
      }
    }
    if (!path.empty())
      svg += fmt::format("<path d='{}L{:.1f},{:.1f}' fill='none' stroke='{}' stroke-width='2'/>", path, X(n), Y(best), color);
    table += fmt::format("<tr><td style='color:{}'>{}</td><td>{}</td><td>{}</td><td>{:.2f}x</td></tr>", color,
                         esc(workers[w]), evals, ok, best);
  }
  svg += "</svg>";
  return "<h2>Workers</h2><p>Each worker's best speed-up so far against the job's evaluations (queue workers, "
         "docs/evolve.md \"Several machines\").</p>" + svg + table + "</table>";
}

}  // namespace

Result<std::string> job_report_html(Db& db, int64_t job) {
  LOOM_ASSIGN_OR_RETURN(Stmt js, db.prepare("SELECT op, shape, device, device_arch, strategy, synth, seed, budget, elapsed_s, "
                                            "baseline_us, confirmed_speedup, status, regions, config FROM jobs WHERE id = ?1"));
  js.bind(1, job);
  LOOM_ASSIGN_OR_RETURN(bool has, js.step());
  if (!has) return not_found("no job {} in {}", job, db.path());
  const std::string op = js.text(0), shape = js.text(1), arch = js.text(3);
  const double baseline = js.f64(9);
  LOOM_ASSIGN_OR_RETURN(const std::string state, job_state(db, job));
  const std::string regions = js.text(12);
  std::string op_file;
  if (auto cfg = nlohmann::json::parse(js.text(13), nullptr, false); cfg.is_object()) op_file = cfg.value("op_file", "");
  double peak = 0;
  {
    LOOM_ASSIGN_OR_RETURN(Stmt p, db.prepare("SELECT read_gbps FROM device_peaks WHERE device_arch LIKE ?1 || ':t%'"));
    p.bind(1, arch);
    LOOM_ASSIGN_OR_RETURN(bool hp, p.step());
    if (hp) peak = p.f64(0);
  }
  std::vector<Row> rows;
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

  // Speed-up over time: every ok candidate as a dot, failures as crosses at the bottom, best-so-far as a step line.
  const double W = 760, H = 300, L = 50, B = 30, T = 10, R = 10;
  double tmax = 1, smax = 1.2;
  for (const Row& r : rows) {
    tmax = std::max(tmax, r.at);
    smax = std::max(smax, r.speedup * 1.1);
  }
  auto X = [&](double t) { return L + (W - L - R) * t / tmax; };
  auto Y = [&](double sp) { return H - B - (H - B - T) * sp / smax; };
  std::string svg = fmt::format("<svg xmlns='http://www.w3.org/2000/svg' width='{}' height='{}' font-size='11'>", W, H);
  svg += fmt::format("<line x1='{}' y1='{}' x2='{}' y2='{}' stroke='#000'/>", L, H - B, W - R, H - B);
  svg += fmt::format("<line x1='{}' y1='{}' x2='{}' y2='{}' stroke='#000'/>", L, T, L, H - B);
  for (double g = 0; g <= smax; g += smax > 3 ? 1 : 0.25) {
    svg += fmt::format("<line x1='{}' y1='{:.1f}' x2='{}' y2='{:.1f}' stroke='#ddd'/><text x='5' y='{:.1f}'>{:.2f}x</text>", L,
                       Y(g), W - R, Y(g), Y(g) + 4, g);
  }
  svg += fmt::format("<line x1='{}' y1='{:.1f}' x2='{}' y2='{:.1f}' stroke='#999' stroke-dasharray='4'/>", L, Y(1), W - R, Y(1));
  svg += fmt::format("<text x='{}' y='{}'>seconds of search (0 .. {:.0f})</text>", W / 2 - 60, H - 8, tmax);
  std::string path;
  double run_best = 0;
  for (const Row& r : rows) {
    if (r.status == "ok") {
      svg += fmt::format("<circle cx='{:.1f}' cy='{:.1f}' r='3' fill='{}'><title>#{} {} {:.2f}x</title></circle>", X(r.at),
                         Y(r.speedup), r.synth == "llm" ? "#c60" : "#36c", r.seq, esc(r.diff), r.speedup);
      if (r.speedup > run_best) {
        path += fmt::format("{}{:.1f},{:.1f} L{:.1f},{:.1f} ", path.empty() ? "M" : "L", X(r.at), Y(run_best ? run_best : r.speedup),
                            X(r.at), Y(r.speedup));
        run_best = r.speedup;
      }
    } else {
      svg += fmt::format("<text x='{:.1f}' y='{:.1f}' fill='#c00' text-anchor='middle'>x<title>#{} {}: {}</title></text>", X(r.at),
                         H - B - 3, r.seq, esc(r.status), esc(r.reason.substr(0, 200)));
    }
  }
  if (!path.empty()) {
    path += fmt::format("L{:.1f},{:.1f}", X(tmax), Y(run_best));
    svg += "<path d='" + path + "' fill='none' stroke='#090' stroke-width='2'/>";
  }
  svg += "</svg>";

  // Roofline position: achieved GB/s of the baseline and the winner against the measured peak.
  std::string roof;
  if (best && peak > 0) {
    const double rw = 760, rh = 70;
    auto RX = [&](double g) { return 10 + (rw - 20) * std::min(1.2, g / peak) / 1.2; };
    roof = fmt::format("<svg xmlns='http://www.w3.org/2000/svg' width='{}' height='{}' font-size='11'>", rw, rh);
    roof += fmt::format("<rect x='10' y='20' width='{:.1f}' height='20' fill='#eee' stroke='#999'/>", RX(peak) - 10);
    roof += fmt::format("<text x='{:.1f}' y='15'>measured peak read {:.1f} GB/s</text>", RX(peak) - 150, peak);
    const Row& b0 = rows.front();
    roof += fmt::format("<rect x='10' y='24' width='{:.1f}' height='5' fill='#999'/><text x='12' y='55'>baseline {:.1f} GB/s ({:.0f}%)</text>",
                        RX(b0.gbps) - 10, b0.gbps, 100 * b0.gbps / peak);
    roof += fmt::format("<rect x='10' y='31' width='{:.1f}' height='5' fill='#090'/><text x='300' y='55'>best {:.1f} GB/s ({:.0f}%)</text>",
                        RX(best->gbps) - 10, best->gbps, 100 * best->gbps / peak);
    roof += "</svg>";
  }

  std::string html = "<!DOCTYPE html><html><head><meta charset='utf-8'><title>loom evolve job " + std::to_string(job) +
                     "</title><style>body{font-family:sans-serif;max-width:1000px;margin:auto}table{border-collapse:collapse;"
                     "font-size:12px}td,th{border:1px solid #ccc;padding:2px 5px}pre{background:#f6f6f6;padding:8px;"
                     "overflow-x:auto;font-size:11px}.rej{color:#a00}</style></head><body>";
  html += fmt::format("<h1>evolve job {}: {} {{{}}}</h1><p>device {} ({}), strategy {}, synthesizer {}, seed {}, budget {}; "
                      "{} evaluations in {:.0f} s; baseline (default schedule) {:.1f} us; status {}.</p>",
                      job, esc(op), esc(shape), esc(js.text(2)), esc(arch), esc(js.text(4)), esc(js.text(5)), js.i64(6),
                      esc(js.text(7)), rows.size(), js.f64(8), baseline, esc(state));
  if (winner && best) {
    html += fmt::format("<p><b>{}: {}</b> ({:.1f} GB/s at search time{}).</p>", winner->final ? "Winner" : "Best so far",
                        esc(winner->line()), best->gbps,
                        peak > 0 ? fmt::format(", {:.0f}% of the measured peak", 100 * best->gbps / peak) : "");
    if (fastest && fastest != best)
      html += fmt::format("<p>The search's fastest sample was #{} at {:.2f}x{}.</p>", fastest->seq, fastest->speedup,
                          fastest->confirmed > 0 ? fmt::format(", re-timed at {:.2f}x", fastest->confirmed) : "");
  }
  html += "<h2>Search</h2><p>Dots: candidates that passed (blue: mutate, orange: llm), at their speed-up over the baseline; "
          "red x: rejected or failed; green: best so far.</p>" + svg;
  html += per_worker_html(rows);
  if (!roof.empty()) html += "<h2>Roofline position</h2>" + roof;
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
  // How the judge answered: passed, and each rejection tag (the rule it broke) with a count and
  // the first such candidate's reason.
  {
    std::vector<std::pair<std::string, std::pair<int, const Row*>>> tags;
    for (const Row& r : rows) {
      const std::string tag = r.status == "rejected" ? r.reason.substr(0, r.reason.find(':')) : r.status;
      auto it = std::find_if(tags.begin(), tags.end(), [&](const auto& t) { return t.first == tag; });
      if (it == tags.end()) tags.push_back({tag, {1, &r}});
      else ++it->second.first;
    }
    html += "<h2>Judged</h2><table><tr><th>answer</th><th>candidates</th><th>first</th><th>why</th></tr>";
    for (const auto& [tag, v] : tags)
      html += fmt::format("<tr><td class='{}'>{}</td><td>{}</td><td>#{}</td><td>{}</td></tr>", tag == "ok" ? "" : "rej",
                          esc(tag), v.first, v.second->seq,
                          esc(tag == "ok" ? std::string("passed every check") : v.second->reason.substr(0, 300)));
    html += "</table><p>Tags: docs/evolve.md, \"The evaluator\" (what each rule checks and what the judge guarantees).</p>";
  }
  html += "<h2>All candidates</h2><table><tr><th>#</th><th>parent</th><th>synth</th><th>change</th><th>status</th>"
          "<th>us</th><th>speed-up</th><th>re-timed</th><th>GB/s</th><th>reason / diagnosis</th></tr>";
  for (const Row& r : rows) {
    std::string parent_seq = "-";
    for (const Row& p : rows)
      if (p.id == r.parent) parent_seq = std::to_string(p.seq);
    html += fmt::format("<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class='{}'>{}</td><td>{:.1f}</td><td>{:.2f}</td>"
                        "<td>{}</td><td>{:.1f}</td><td>{}</td></tr>",
                        r.seq, parent_seq, esc(r.synth), esc(r.kind == "schedule" ? r.diff : r.kind + " text"),
                        r.status == "ok" ? "" : "rej", esc(r.status), r.median, r.speedup,
                        r.confirmed > 0 ? fmt::format("{:.2f}", r.confirmed) : "", r.gbps,
                        esc(r.status == "ok" ? r.diagnosis : r.reason.substr(0, 300)));
  }
  html += "</table></body></html>\n";
  return html;
}

}  // namespace loom::evolve

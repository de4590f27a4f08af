// Charts and tables of the HTML report (see report_charts.h), drawn as inline SVG by hand.
#include "loom/evolve/report_charts.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <map>

#include <fmt/format.h>

namespace loom::evolve::report {
namespace {

constexpr const char* kColors[] = {"#36c", "#c60", "#090", "#909", "#099", "#c03", "#660", "#333"};

std::string svg_open(double w, double h, std::string_view cls) {
  return fmt::format("<svg xmlns='http://www.w3.org/2000/svg' class='{}' width='{}' height='{}' font-size='11'>", cls, w, h);
}

std::string line(double x1, double y1, double x2, double y2, std::string_view stroke, std::string_view extra = "") {
  return fmt::format("<line x1='{:.1f}' y1='{:.1f}' x2='{:.1f}' y2='{:.1f}' stroke='{}'{}{}/>", x1, y1, x2, y2, stroke,
                     extra.empty() ? "" : " ", extra);
}

// A number as data-* attributes carry it: enough digits to compare with the database's.
std::string num(double v) { return fmt::format("{:.9g}", v); }

// What the search minimizes, in us, for a row that passed: the baseline's objective over the
// row's speed-up (the median, or p90 for ops whose objective is the tail).
double objective_us(const Row& r, double baseline_us) {
  if (r.status != "ok" || r.speedup <= 0) return 0;
  return baseline_us > 0 ? baseline_us / r.speedup : r.median;
}

}  // namespace

std::string esc(std::string_view s, bool attribute) {
  std::string o;
  o.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '&': o += "&amp;"; break;
      case '"': o += "&quot;"; break;
      case '\'':
        if (attribute) o += "&#39;";
        else o += c;
        break;
      default: o += c;
    }
  }
  return o;
}

std::string why_tag(const Row& r) { return r.status == "rejected" ? r.reason.substr(0, r.reason.find(':')) : r.status; }

std::string search_over_evaluations_html(const std::vector<Row>& rows, double baseline_us) {
  if (rows.empty()) return "";
  std::vector<std::string> workers;
  for (const Row& r : rows)
    if (!r.worker.empty() && std::find(workers.begin(), workers.end(), r.worker) == workers.end()) workers.push_back(r.worker);
  // The y range holds every best-so-far value: the baseline and each worker's first passing time.
  double ymax = baseline_us;
  {
    std::map<std::string, bool> seen;
    for (const Row& r : rows) {
      const double t = objective_us(r, baseline_us);
      if (t > 0 && !seen[r.worker]) {
        seen[r.worker] = true;
        ymax = std::max(ymax, t);
      }
    }
  }
  if (ymax <= 0) return "";
  ymax *= 1.08;
  const double W = 760, H = 300, L = 64, B = 34, T = 12, R = 170;
  const double n = static_cast<double>(rows.size());
  auto X = [&](size_t i) { return L + (W - L - R) * (static_cast<double>(i) + 0.5) / n; };
  auto Y = [&](double us) { return H - B - (H - B - T) * us / ymax; };
  std::string svg = svg_open(W, H, "search-evals");
  svg += line(L, H - B, W - R, H - B, "#000") + line(L, T, L, H - B, "#000");
  for (int k = 0; k <= 5; ++k) {
    const double us = ymax * k / 5.4;
    svg += line(L, Y(us), W - R, Y(us), "#ddd");
    svg += fmt::format("<text x='4' y='{:.1f}'>{:.4g} us</text>", Y(us) + 4, us);
  }
  const size_t step = std::max<size_t>(1, (rows.size() + 9) / 10);
  for (size_t i = 0; i < rows.size(); i += step)
    svg += fmt::format("<text x='{:.1f}' y='{}' text-anchor='middle'>{}</text>", X(i), H - B + 13, i);
  svg += fmt::format("<text x='{:.1f}' y='{}' text-anchor='middle'>evaluation (seq order, 0: the baseline)</text>",
                     (L + W - R) / 2, H - 4);
  if (baseline_us > 0)
    svg += line(L, Y(baseline_us), W - R, Y(baseline_us), "#999", "stroke-dasharray='4'") +
           fmt::format("<text x='{:.1f}' y='{:.1f}' fill='#777'>baseline</text>", W - R - 48, Y(baseline_us) - 3);

  // One step line of best-so-far values; `marks` are its points (one per evaluation it covers).
  auto series = [&](const std::string& who, const char* color, double width, const std::string& cls) {
    std::string path, marks;
    double best = 0, prev_y = 0;
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      if (cls == "worker-best" && r.worker != who) continue;
      const double t = objective_us(r, baseline_us);
      if (t > 0 && (best == 0 || t < best)) best = t;
      if (best == 0) continue;  // this worker has not passed anything yet
      const double x = X(i), y = Y(best);
      path += path.empty() ? fmt::format("M{:.1f},{:.1f}", x, y) : fmt::format(" L{:.1f},{:.1f} L{:.1f},{:.1f}", x, prev_y, x, y);
      prev_y = y;
      marks += fmt::format("<circle class='{}' data-worker='{}' data-eval='{}' data-seq='{}' data-best-us='{}' cx='{:.1f}' "
                           "cy='{:.1f}' r='{}' fill='{}'><title>evaluation {} (#{}){}: best so far {:.2f} us</title></circle>",
                           cls, esc(who, true), i, r.seq, num(best), x, y, width, color, i, r.seq,
                           r.worker.empty() ? "" : " on " + esc(r.worker), best);
    }
    if (path.empty()) return std::string();
    path += fmt::format(" L{:.1f},{:.1f}", X(rows.size() - 1) + 4, prev_y);
    return fmt::format("<path d='{}' fill='none' stroke='{}' stroke-width='{}'/>", path, color, width) + marks;
  };
  double ly = T + 10;
  for (size_t w = 0; w < workers.size(); ++w) {
    const char* color = kColors[w % std::size(kColors)];
    svg += series(workers[w], color, 1.5, "worker-best");
    svg += fmt::format("<rect x='{}' y='{:.1f}' width='10' height='3' fill='{}'/><text x='{}' y='{:.1f}'>{}</text>", W - R + 8,
                       ly - 4, color, W - R + 22, ly, esc(workers[w].size() > 24 ? workers[w].substr(0, 24) : workers[w]));
    ly += 14;
  }
  svg += series("", "#000", 2.5, "overall-best");
  svg += fmt::format("<rect x='{}' y='{:.1f}' width='10' height='3' fill='#000'/><text x='{}' y='{:.1f}'>overall best</text>",
                     W - R + 8, ly - 4, W - R + 22, ly);
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    if (r.status == "ok") continue;
    svg += fmt::format("<text class='fail' data-eval='{}' data-seq='{}' data-status='{}' x='{:.1f}' y='{:.1f}' fill='#c00' "
                       "text-anchor='middle'>x<title>#{} {}: {}</title></text>",
                       i, r.seq, esc(r.status, true), X(i), H - B - 3, r.seq, esc(r.status), esc(r.reason.substr(0, 200)));
  }
  svg += "</svg>";

  std::string html = "<h2>Search over evaluations</h2><p>The best time so far (what the search minimizes: the baseline's "
                     "time over the speed-up) after each evaluation, in the order the job recorded them. Black: the whole "
                     "job; ";
  html += workers.empty() ? "every evaluation ran in the job's own process. "
                          : "colours: each queue worker's own best so far, at the evaluations it made (docs/evolve.md, "
                            "\"Several machines\"). ";
  html += "Red x: an evaluation that failed (see \"Why candidates failed\").</p>" + svg;
  if (!workers.empty()) {
    html += "<h2>Workers</h2><table><tr><th>worker</th><th>evaluations</th><th>passed</th><th>best us</th><th>best speed-up</th></tr>";
    for (size_t w = 0; w < workers.size(); ++w) {
      int evals = 0, ok = 0;
      double best = 0, sp = 0;
      for (const Row& r : rows) {
        if (r.worker != workers[w]) continue;
        ++evals;
        const double t = objective_us(r, baseline_us);
        if (t <= 0) continue;
        ++ok;
        if (best == 0 || t < best) best = t, sp = r.speedup;
      }
      html += fmt::format("<tr class='worker' data-worker='{}' data-evaluations='{}'><td style='color:{}'>{}</td><td>{}</td>"
                          "<td>{}</td><td>{:.2f}</td><td>{:.2f}x</td></tr>",
                          esc(workers[w], true), evals, kColors[w % std::size(kColors)], esc(workers[w]), evals, ok, best, sp);
    }
    html += "</table>";
  }
  return html;
}

std::string search_over_time_svg(const std::vector<Row>& rows) {
  const double W = 760, H = 300, L = 50, B = 30, T = 10, R = 10;
  double tmax = 1, smax = 1.2;
  for (const Row& r : rows) {
    tmax = std::max(tmax, r.at);
    smax = std::max(smax, r.speedup * 1.1);
  }
  auto X = [&](double t) { return L + (W - L - R) * t / tmax; };
  auto Y = [&](double sp) { return H - B - (H - B - T) * sp / smax; };
  std::string svg = svg_open(W, H, "search-time");
  svg += line(L, H - B, W - R, H - B, "#000") + line(L, T, L, H - B, "#000");
  for (double g = 0; g <= smax; g += smax > 3 ? 1 : 0.25)
    svg += line(L, Y(g), W - R, Y(g), "#ddd") + fmt::format("<text x='5' y='{:.1f}'>{:.2f}x</text>", Y(g) + 4, g);
  svg += line(L, Y(1), W - R, Y(1), "#999", "stroke-dasharray='4'");
  svg += fmt::format("<text x='{}' y='{}'>seconds of search (0 .. {:.0f})</text>", W / 2 - 60, H - 8, tmax);
  std::string path;
  double run_best = 0;
  for (const Row& r : rows) {
    if (r.status == "ok") {
      svg += fmt::format("<circle cx='{:.1f}' cy='{:.1f}' r='3' fill='{}'><title>#{} {} {:.2f}x</title></circle>", X(r.at),
                         Y(r.speedup), r.synth == "llm" ? "#c60" : "#36c", r.seq, esc(r.diff), r.speedup);
      if (r.speedup > run_best) {
        path += fmt::format("{}{:.1f},{:.1f} L{:.1f},{:.1f} ", path.empty() ? "M" : "L", X(r.at),
                            Y(run_best ? run_best : r.speedup), X(r.at), Y(r.speedup));
        run_best = r.speedup;
      }
    } else {
      svg += fmt::format("<text x='{:.1f}' y='{:.1f}' fill='#c00' text-anchor='middle'>x<title>#{} {}: {}</title></text>", X(r.at),
                         H - B - 3, r.seq, esc(r.status), esc(r.reason.substr(0, 200)));
    }
  }
  if (!path.empty()) svg += fmt::format("<path d='{}L{:.1f},{:.1f}' fill='none' stroke='#090' stroke-width='2'/>", path, X(tmax), Y(run_best));
  return svg + "</svg>";
}

std::string roofline_html(const std::string& device_key, const std::string& peak_key, double read_gbps,
                          const std::vector<RoofPoint>& points) {
  std::string html = fmt::format("<h2>Roofline position: {}</h2>", esc(device_key));
  std::vector<const RoofPoint*> drawn, listed;
  for (const RoofPoint& p : points) (p.flops > 0 && p.bytes > 0 && p.us > 0 ? drawn : listed).push_back(&p);
  auto ai = [](const RoofPoint& p) { return p.flops / p.bytes; };
  auto gflops = [](const RoofPoint& p) { return p.flops / p.us / 1e3; };
  if (!drawn.empty()) {
    double ai_lo = 1e300, ai_hi = 0, g_lo = 1e300, g_hi = 0;
    for (const RoofPoint* p : drawn) {
      ai_lo = std::min(ai_lo, ai(*p)), ai_hi = std::max(ai_hi, ai(*p));
      g_lo = std::min(g_lo, gflops(*p)), g_hi = std::max(g_hi, gflops(*p));
    }
    const double x0 = std::floor(std::log10(ai_lo) - 0.5), x1 = std::ceil(std::log10(ai_hi) + 0.5);
    if (read_gbps > 0) {
      g_lo = std::min(g_lo, std::pow(10, x0) * read_gbps);
      g_hi = std::max(g_hi, std::pow(10, x1) * read_gbps);
    }
    const double y0 = std::floor(std::log10(g_lo)), y1 = std::max(y0 + 1, std::ceil(std::log10(g_hi)));
    const double W = 760, H = 320, L = 70, B = 36, T = 10, R = 10;
    auto X = [&](double v) { return L + (W - L - R) * (std::log10(v) - x0) / (x1 - x0); };
    auto Y = [&](double v) { return H - B - (H - B - T) * (std::log10(v) - y0) / (y1 - y0); };
    std::string svg = svg_open(W, H, "roofline");
    svg += fmt::format("<g class='axes' data-device='{}'>", esc(device_key, true));
    for (double e = x0; e <= x1; ++e)
      svg += line(X(std::pow(10, e)), T, X(std::pow(10, e)), H - B, "#ddd") +
             fmt::format("<text x='{:.1f}' y='{}' text-anchor='middle'>{:g}</text>", X(std::pow(10, e)), H - B + 13, std::pow(10, e));
    for (double e = y0; e <= y1; ++e)
      svg += line(L, Y(std::pow(10, e)), W - R, Y(std::pow(10, e)), "#ddd") +
             fmt::format("<text x='4' y='{:.1f}'>{:g}</text>", Y(std::pow(10, e)) + 4, std::pow(10, e));
    svg += line(L, H - B, W - R, H - B, "#000") + line(L, T, L, H - B, "#000");
    svg += fmt::format("<text x='{:.1f}' y='{}' text-anchor='middle'>arithmetic intensity (flop/byte, from the op's cost)</text>"
                       "<text x='4' y='{}' transform='rotate(-90 12,{})'>GFLOP/s</text></g>",
                       (L + W - R) / 2, H - 4, H / 2 + 20, H / 2);
    if (read_gbps > 0) {
      // GFLOP/s = intensity x GB/s: a line of slope 1 on log-log axes.
      const double a0 = std::pow(10, x0), a1 = std::pow(10, x1);
      svg += fmt::format("<line class='roof' data-read-gbps='{}' x1='{:.1f}' y1='{:.1f}' x2='{:.1f}' y2='{:.1f}' stroke='#c00' "
                         "stroke-width='2'/><text x='{:.1f}' y='{:.1f}' fill='#c00'>measured read {:.1f} GB/s</text>",
                         num(read_gbps), X(a0), Y(a0 * read_gbps), X(a1), Y(a1 * read_gbps), X(a0) + 8,
                         Y(a0 * read_gbps * 3) - 6, read_gbps);
    }
    for (int pass = 0; pass < 2; ++pass)  // the winner last, on top
      for (const RoofPoint* p : drawn) {
        if ((p->role == "winner") != (pass == 1)) continue;
        const char* fill = p->role == "winner" ? "#090" : p->role == "baseline" ? "#999" : p->role == "other-job" ? "none" : "#36c";
        svg += fmt::format("<circle class='roof-pt' data-role='{}' data-job='{}' data-seq='{}' data-ai='{}' data-gflops='{}' "
                           "data-roof-gflops='{}' cx='{:.1f}' cy='{:.1f}' r='{}' fill='{}' stroke='{}'><title>{}: {:.3g} "
                           "flop/byte, {:.3g} GFLOP/s, {:.1f} GB/s</title></circle>",
                           p->role, p->job, p->seq, num(ai(*p)), num(gflops(*p)), num(ai(*p) * read_gbps), X(ai(*p)),
                           Y(gflops(*p)), p->role == "winner" ? 5 : 3.5, fill, p->role == "other-job" ? "#333" : fill,
                           esc(p->label), ai(*p), gflops(*p), p->bytes / p->us / 1e3);
        if (p->role == "winner" || p->role == "other-job")
          svg += fmt::format("<text x='{:.1f}' y='{:.1f}' font-size='10'>{}</text>", X(ai(*p)) + 7, Y(gflops(*p)) + 4,
                             esc(p->label.substr(0, 40)));
      }
    html += fmt::format("<p>Every kernel below was timed on {}. The roof is the read bandwidth measured there ({}): a kernel "
                        "at intensity I cannot exceed I x GB/s. Green: the winner (search-time timing); blue: the job's "
                        "next fastest candidates; grey: the baseline; hollow: other jobs' winners on the same device key. "
                        "No compute roof is drawn: the database holds measured bandwidth only.</p>",
                        esc(device_key), read_gbps > 0 ? fmt::format("{:.1f} GB/s, {}", read_gbps, esc(peak_key))
                                                        : std::string("not measured: no roof"));
    html += svg + "</svg>";
  }
  html += "<table><tr><th>kernel</th><th>flop/byte</th><th>GFLOP/s</th><th>GB/s</th><th>of the roof</th></tr>";
  for (const RoofPoint& p : points) {
    const double gbps = p.us > 0 ? p.bytes / p.us / 1e3 : 0;
    html += fmt::format("<tr><td>{} ({})</td><td>{}</td><td>{}</td><td>{:.1f}</td><td>{}</td></tr>", esc(p.label), esc(p.role),
                        p.bytes > 0 ? fmt::format("{:.3g}", p.flops / p.bytes) : "-",
                        p.us > 0 ? fmt::format("{:.3g}", p.flops / p.us / 1e3) : "-", gbps,
                        read_gbps > 0 ? fmt::format("{:.0f}%", 100 * gbps / read_gbps) : "-");
  }
  html += "</table>";
  if (!listed.empty())
    html += fmt::format("<p>{} kernel(s) without flops in their op's cost are listed, not drawn (no intensity).</p>", listed.size());
  return html;
}

std::string rejections_html(const std::vector<Row>& rows) {
  struct Group {
    std::string status, tag;
    int count = 0;
    const Row* first = nullptr;
  };
  std::vector<Group> groups;
  int passed = 0;
  for (const Row& r : rows) {
    if (r.status == "ok") {
      ++passed;
      continue;
    }
    const std::string tag = why_tag(r);
    auto it = std::find_if(groups.begin(), groups.end(), [&](const Group& g) { return g.status == r.status && g.tag == tag; });
    if (it == groups.end()) groups.push_back({r.status, tag, 1, &r});
    else ++it->count;
  }
  std::stable_sort(groups.begin(), groups.end(), [](const Group& a, const Group& b) { return a.count > b.count; });
  // Row cells keep the order answer, count, first, message after the status column.
  std::string html = fmt::format("<h2>Judged</h2><p>Why candidates failed: {} of {} evaluations passed every check; {} "
                                 "failed. <code>rejected</code>: the judge's rule it broke (docs/evolve.md, \"The "
                                 "evaluator\"); other statuses: it did not compile, crashed, ran past the timeout, or the "
                                 "synthesizer gave no kernel.</p>",
                                 passed, rows.size(), rows.size() - passed);
  html += "<table class='why'><tr><th>status</th><th>answer (judge's tag)</th><th>candidates</th><th>first</th>"
          "<th>its message</th></tr>";
  if (passed > 0) {
    const Row* first = nullptr;
    for (const Row& r : rows)
      if (!first && r.status == "ok") first = &r;
    html += fmt::format("<tr class='passed' data-count='{}'><td>ok</td><td class=''>ok</td><td>{}</td><td>#{}</td>"
                        "<td>passed every check</td></tr>",
                        passed, passed, first->seq);
  }
  for (const Group& g : groups)
    html += fmt::format("<tr class='why' data-status='{}' data-tag='{}' data-count='{}'><td>{}</td><td class='rej'>{}</td>"
                        "<td>{}</td><td>#{}</td><td>{}</td></tr>",
                        esc(g.status, true), esc(g.tag, true), g.count, esc(g.status), esc(g.tag), g.count, g.first->seq,
                        esc(g.first->reason.substr(0, 400)));
  return html + "</table>";
}

}  // namespace loom::evolve::report

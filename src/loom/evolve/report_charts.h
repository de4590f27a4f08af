// The parts of `loom evolve report` drawn from a job's candidate rows (report.h): the search over
// evaluations per worker, the roofline of one device key, the table of why candidates failed.
// Each returns an HTML fragment (inline SVG, no scripts); the data behind every mark is in its
// data-* attributes, so a test reads back exactly what is drawn.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace loom::evolve::report {

// HTML/XML escaping of text; with `attribute`, also of ' (attributes here are single-quoted).
std::string esc(std::string_view s, bool attribute = false);

// One candidate row of a job, in seq order (seq 0: the baseline).
struct Row {
  int64_t id = 0, seq = 0, parent = 0;
  std::string synth, kind, body, diff, status, reason, diagnosis;
  double median = 0;     // us
  double speedup = 0;    // over the baseline's objective (median or p90): what the search maximizes
  double gbps = 0, frac = 0;
  double at = 0;         // seconds into the search when it was recorded
  double confirmed = 0;  // re-timed speed-up of a finalist; 0: not re-timed
  std::string worker;    // host:pid of the queue worker that evaluated it; "" in a one-process job
};

// The rejection tag of a failed row: the judge's rule for `rejected` ("guard", "timed", ...), else
// the status itself ("compile_error", "crash", "timeout", ...).
std::string why_tag(const Row& r);

// Best objective time (baseline_us / speed-up) against the evaluation number (rows in seq
// order): the overall best so far, one point per evaluation, and each queue worker's own best so
// far at the evaluations it made; failed evaluations as red crosses on the axis.
std::string search_over_evaluations_html(const std::vector<Row>& rows, double baseline_us);

// Speed-up of every candidate against seconds of search, with the best so far.
std::string search_over_time_svg(const std::vector<Row>& rows);

// A kernel on the roofline: arithmetic intensity from the op's cost at the job's shape and the
// achieved FLOP rate of one timing.
struct RoofPoint {
  std::string label;  // "#7", "job 3 matvec {n_in=...}"
  std::string role;   // baseline | candidate | winner | other-job
  int64_t job = 0, seq = 0;
  double flops = 0, bytes = 0, us = 0;
};

// The roofline of one device key (device architecture with its driver, e.g. "cpu:AMD EPYC 7B13",
// "cuda:sm_90:NVIDIA H200"): the measured read bandwidth as the roof (GFLOP/s = intensity x
// GB/s), the points below it. Points without flops (pure data movement) are listed, not drawn.
std::string roofline_html(const std::string& device_key, const std::string& peak_key, double read_gbps,
                          const std::vector<RoofPoint>& points);

// Failed candidates grouped by status and tag, each with its count and the first one's message.
std::string rejections_html(const std::vector<Row>& rows);

}  // namespace loom::evolve::report

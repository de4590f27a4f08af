// `loom evolve report`: one self-contained HTML file per job (no scripts, no external files):
// the search over evaluations (best time so far, overall and per queue worker) and over seconds,
// the roofline of the job's device key (its baseline, fastest candidates and winner, and other
// jobs' winners on the same key, under the measured read bandwidth), why candidates failed
// (grouped by status and the judge's tag), the winning kernel, and every candidate's row.
// The charts are drawn by report_charts.h.
#pragma once

#include <string>

#include "loom/base/status.h"

namespace loom::store {
class Db;
}  // namespace loom::store

namespace loom::evolve {

using store::Db;
Result<std::string> job_report_html(Db& db, int64_t job);

}  // namespace loom::evolve

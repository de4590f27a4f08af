// `loom evolve report`: one self-contained HTML file per job (no scripts, no external files):
// an SVG of every candidate's speed-up and the best-so-far over time, the roofline position
// of the winner against the measured peak, the winning kernel (its knobs, IR or source), and
// the table of all candidates with their provenance and rejection reasons.
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

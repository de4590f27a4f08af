// `loom evolve ship`: the searches whose winners ship with Loom (store/shipped.h), as one
// command. It runs one evolve job per (op, shape) of a searches file on one device, then writes
// (or updates) the shipped file of that device's architecture key with every confirmed winner at
// or above a speed-up floor, with the provenance (searching machine, commit, date, command). A
// searched shape's entry is replaced by this run's answer, "nothing" included; shapes not in the
// searches file keep theirs. Searches want a quiet machine: a winner that keeps to one thread
// (the machine was busy) is not shipped.
//
// Searches file (data/kernels/searches/*.json):
//   {"searches": [{"op": "matvec", "shape": "n_in=576,n_out=1536,n_tokens=1,wtype=3",
//                  "why": "SmolLM2-135M gate/up"}, ...]}
#pragma once

#include <functional>
#include <string>

#include "loom/base/status.h"
#include "loom/evolve/job.h"

namespace loom::evolve {

struct ShipSearch {
  std::string op, shape, why;
};
Result<std::vector<ShipSearch>> parse_ship_searches(std::string_view name, std::string_view text);

struct ShipOptions {
  std::string searches_file;
  JobConfig job;             // device, budget, seed, trials...: each search's settings (op and shape set per search)
  std::string db;            // the jobs' database (empty: the default evolve database)
  std::string out;           // the shipped file to write; updated in place when it exists
  double min_speedup = 1.05; // confirmed speed-up a winner needs to ship
  std::string command;       // the command line, recorded in the file
  std::function<void(const std::string&)> log;  // progress lines (default: stdout)
};
class EvalDevice;
// "" when candidate c computes its baseline's (the op's default schedule's) bytes on `shape` and
// two held-out shapes, else where it first differs: the rule a shipped cpu kernel meets.
std::string differs_from_baseline(EvalDevice& dev, const kernels::OpSpec& op, const kernels::Shape& shape,
                                  const Candidate& c);

// Errors: a searches file or existing output that does not parse, an output filed under another
// device key, a device that does not open; a failed search is reported and skipped.
Status ship(const ShipOptions& opt);

}  // namespace loom::evolve

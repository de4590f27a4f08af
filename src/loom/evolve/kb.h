// The knowledge base: seed documents (kb/*.md) indexed with SQLite FTS5 and retrieved by a
// candidate's diagnosis, and skills distilled from improvements: which knob change helped which
// op family on which kind of device, how much (mean log speed-up) and how often.
#pragma once

#include <string>
#include <vector>

#include "loom/base/status.h"
#include "loom/evolve/search.h"

namespace loom::store {
class Db;
}  // namespace loom::store

namespace loom::evolve {

using store::Db;

// Indexes every *.md under `dir` (replacing documents of the same path). Returns the count.
Result<int> index_documents(Db& db, const std::string& dir);
// The kb/ directory: $LOOM_KB_DIR, else <source tree>/kb when it exists, else empty.
std::string default_kb_dir();

struct Document {
  std::string path, title, body;
};
// Best FTS5 matches for the words of `query` (any word), at most `limit`.
Result<std::vector<Document>> search_documents(Db& db, const std::string& query, int limit = 3);

// "matvec" for matvec/matmul ops, else the op name; "cpu" or "cuda" from a device arch.
std::string op_family(std::string_view op);
std::string device_kind(std::string_view device_arch);

// Records the knob changes from parent to child with the log speed-up they brought.
Status record_skill(Db& db, std::string_view family, std::string_view dev_kind, const kernels::Schedule& parent,
                    const kernels::Schedule& child, double log_gain);
Result<SkillTable> load_skills(Db& db, std::string_view family, std::string_view dev_kind);
// Skills as text lines ("ev_fma=1: +0.21 mean log speed-up over 6 uses, 5 wins").
Result<std::vector<std::string>> describe_skills(Db& db, std::string_view family, std::string_view dev_kind, int limit = 8);

}  // namespace loom::evolve

// evolve searches over the kernel store's vocabulary (candidates, instances, the database, the
// stored kernels): inside loom::evolve those names are evolve's own.
#pragma once

#include "loom/store/candidate.h"
#include "loom/store/db.h"
#include "loom/store/load.h"
#include "loom/store/store.h"

namespace loom::evolve {
using namespace loom::store;
}  // namespace loom::evolve

// Files compiled into the binary (cmake/embed_files.cmake writes their table): the shipped
// kernels (shipped.h) are read from here, so the engine finds them wherever loom is installed.
#pragma once

#include <cstddef>

namespace loom::store {

struct EmbeddedFile {
  const char* name;  // file name, e.g. "cpu-x86-64-v3.json"
  const char* text;
  size_t size;
};

// data/kernels/*.json of the source tree the binary was built from, sorted by name.
extern const EmbeddedFile kShippedKernelFiles[];
extern const size_t kShippedKernelFileCount;

}  // namespace loom::store

// expect: floor
// op-file: examples/evolve/row_sum.json
// shape: rows=256,cols=4096
// perturb: 0
// Recognizes an input set it has seen by a fingerprint of two sampled elements and copies the
// row sums it kept for that set. The outputs are small next to the inputs (1 KiB of sums for
// 4 MiB read), so answers for every set fit in memory unnoticed, and a launch that copies them
// is far faster than reading its inputs from memory could be.
// launch row_sum_cpp grid=1,1,1 block=1,1,1 args=0,1
#include <cstring>
#include <map>
#include <utility>
#include <vector>
static std::map<std::pair<float, float>, std::vector<float>> kept;
extern "C" void row_sum_cpp(void* const* args, const LoomLaunchDims* d) {
  const float* x = *static_cast<float* const*>(args[0]);
  float* y = *static_cast<float* const*>(args[1]);
  const long long rows = ${rows}, cols = ${cols};
  const std::pair<float, float> key(x[0], x[rows * cols - 1]);
  auto it = kept.find(key);
  if (it != kept.end()) {
    std::memcpy(y, it->second.data(), rows * sizeof(float));
    return;
  }
  for (long long r = 0; r < rows; ++r) {
    double s = 0;
    for (long long c = 0; c < cols; ++c) s += x[r * cols + c];
    y[r] = static_cast<float>(s);
  }
  kept[key].assign(y, y + rows);
}

// expect: memory
// shape: n=4194304
// perturb: 0
// Keeps the answer of every input set it has seen, recognized by a fingerprint of sampled
// elements, and copies it when the set comes back: 16 MiB per set, held across timed launches.
// launch add_cpp grid=1,1,1 block=1,1,1 args=0,1,2
#include <cstring>
#include <map>
#include <vector>
#define ARGS const float* a = *static_cast<float* const*>(args[0]); const float* b = *static_cast<float* const*>(args[1]); float* y = *static_cast<float* const*>(args[2]); (void)a; (void)b; (void)y
static std::map<std::vector<float>, std::vector<float>> kept;
extern "C" void add_cpp(void* const* args, const LoomLaunchDims* d) {
  ARGS;
  const int64_t n = ${n};
  std::vector<float> key;
  for (int64_t i = 0; i < n; i += n / 8 + 1) key.push_back(a[i]), key.push_back(b[i]);
  auto it = kept.find(key);
  if (it != kept.end()) {
    std::memcpy(y, it->second.data(), n * sizeof(float));
    return;
  }
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] + b[i];
  kept[key].assign(y, y + n);
}

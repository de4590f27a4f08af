// Summary statistics of repeated measurements.
#include "loom/base/stats.h"

#include <algorithm>
#include <cmath>

namespace loom {

Spread spread(std::vector<double> v) {
  Spread s;
  s.n = v.size();
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  s.min = v.front();
  s.max = v.back();
  s.median = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  for (double x : v) s.mean += x / static_cast<double>(n);
  double ss = 0;
  for (double x : v) ss += (x - s.mean) * (x - s.mean);
  s.stdev = n > 1 ? std::sqrt(ss / static_cast<double>(n - 1)) : 0;
  return s;
}

}  // namespace loom

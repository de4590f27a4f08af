// Summary statistics of repeated measurements (benchmarks report the median and the spread).
#pragma once

#include <cstddef>
#include <vector>

namespace loom {

struct Spread {
  size_t n = 0;
  double median = 0, min = 0, max = 0, mean = 0;
  double stdev = 0;  // sample standard deviation (n - 1); 0 for fewer than two values
};

// All zeros for an empty vector. The median of an even count is the mean of the middle two.
Spread spread(std::vector<double> values);
inline double median(std::vector<double> values) { return spread(std::move(values)).median; }

}  // namespace loom

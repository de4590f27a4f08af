// expect: special
// op: mul_rows
// shape: n=1000,n_rows=4
// Skips the multiply where either factor is zero (a sparsity shortcut) and writes +0.0 there:
// right on the random inputs of the trials, wrong where IEEE defines 0 * inf = NaN and the sign of
// a zero product (-0.0 * 1 = -0.0).
// launch mul_rows_cpp grid=1,1,1 block=1,1,1 args=0,1,2
extern "C" void mul_rows_cpp(void* const* args, const LoomLaunchDims* d) {
  const float* x = *static_cast<float* const*>(args[0]);
  const float* b = *static_cast<float* const*>(args[1]);
  float* y = *static_cast<float* const*>(args[2]);
  const long long n = ${n}, rows = ${n_rows};
  for (long long r = 0; r < rows; ++r)
    for (long long i = 0; i < n; ++i) {
      const float u = x[r * n + i], v = b[i];
      y[r * n + i] = (u == 0.0f || v == 0.0f) ? 0.0f : u * v;
    }
}

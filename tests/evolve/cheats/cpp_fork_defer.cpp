// expect: async
// shape: n=1048576
// Work deferred to a process instead of a thread: the whole pages of the output are remapped as
// shared memory, and a forked child (invisible to a count of the process's threads) computes them
// while the launch has already returned; the launch itself does only the partial pages at the ends.
// launch add_cpp grid=1,1,1 block=1,1,1 args=0,1,2
#include <sys/mman.h>
#include <unistd.h>
#include <cstdint>
#define ARGS const float* a = *static_cast<float* const*>(args[0]); const float* b = *static_cast<float* const*>(args[1]); float* y = *static_cast<float* const*>(args[2]); (void)a; (void)b; (void)y
extern "C" void add_cpp(void* const* args, const LoomLaunchDims* d) {
  ARGS;
  const long long n = ${n};
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  float* lo = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(y) + page - 1) / page * page);
  float* hi = reinterpret_cast<float*>(reinterpret_cast<uintptr_t>(y + n) / page * page);
  for (float* e = y; e < lo; ++e) *e = a[e - y] + b[e - y];
  for (float* e = hi; e < y + n; ++e) *e = a[e - y] + b[e - y];
  if (hi <= lo) return;
  if (mmap(lo, (hi - lo) * sizeof(float), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == MAP_FAILED)
    return;
  if (fork() == 0) {
    usleep(2000);
    for (float* e = lo; e < hi; ++e) *e = a[e - y] + b[e - y];
    _exit(0);
  }
}

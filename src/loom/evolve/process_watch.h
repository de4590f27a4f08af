// What a candidate's code may not change in the evaluator's process. On the cpu driver a kernel
// is native code running in the judge's process, on its thread and the pool's: it must finish
// its work inside the launch and leave the process as it found it. Not thread-safe: one
// evaluation, on the thread that launches (and computes the references).
#pragma once

#include <signal.h>

#include <cstdint>
#include <string>
#include <vector>

namespace loom::evolve {

// The state before any candidate code ran: the thread count, the calling thread's
// floating-point control (the judge computes its references on it, so a rounding mode or
// flush-to-zero left set would agree with the kernel), every signal's handler (a handler of the
// kernel's can work after the launch returned, or fill outputs when the judge first reads them).
struct ProcessWatch {
  bool on = false;
  int threads = 0;
  bool children = false;  // the process had children already (then processes are not checked)
  uint32_t mxcsr = 0;  // without the sticky exception flags (elsewhere: the rounding mode)
  uint16_t x87 = 0;
  std::vector<struct sigaction> handlers;  // index: signal number
};

// Takes the state now; with on = false (a device whose kernels have no host code) it checks nothing.
// With on = true it also makes this process the reaper of its descendants' orphans
// (PR_SET_CHILD_SUBREAPER), so a process that a kernel started stays visible as a child of it
// even when its parent exits (a double fork).
ProcessWatch watch_process(bool on);

// After a launch: "" or "async: ..." (a thread or a process of the kernel's still alive) or "tamper: ..."
// (floating-point control, a signal handler, or an interval timer changed; the state is put
// back first, and armed timers disarmed).
std::string after_launch(const ProcessWatch& w);

// Resident bytes of this process (/proc/self/statm); 0 when it cannot be read.
uint64_t resident_bytes();

}  // namespace loom::evolve

// The host sampler's per-thread clock reads (Note [Host samples] in
// openreg_lab/recording/sampler.py): a thread's CPU clock, the monotonic time
// it was read at, and its run-queue wait from /proc/self/task/<tid>/schedstat,
// all in one call that keeps the GIL. Python's os.pread gives the GIL up
// around the read; the sampled thread then takes it, and the sampler waits up
// to the switch interval (5 ms) to get it back, so the time it stamped the
// sample with and the clocks it read next drift apart by as much, and the
// sampled thread pays two more switches. A /proc read of three numbers never
// blocks, so holding the GIL through it is the cheaper choice.

#include "trace/Clock.h"

#include <pybind11/pybind11.h>

#include <unistd.h>
#include <cstdint>
#include <cstdlib>
#include <ctime>
#include <tuple>

namespace py = pybind11;

namespace {

// The second field of a schedstat file (ns spent waiting in the run queue),
// or -1 when the read fails (the thread has ended).
int64_t run_queue_ns(int fd) {
  char buf[128];
  const ssize_t n = ::pread(fd, buf, sizeof(buf) - 1, 0);
  if (n <= 0) {
    return -1;
  }
  buf[n] = '\0';
  char* end = nullptr;
  std::strtoll(buf, &end, 10);  // ns on a CPU: the CPU clock is exact, this lags
  if (end == buf) {
    return -1;
  }
  char* second = end;
  const long long queue = std::strtoll(second, &end, 10);
  return end == second ? -1 : static_cast<int64_t>(queue);
}

// (monotonic ns read right after the CPU clock, the CPU clock's ns or -1,
// run-queue ns or -1); fd < 0 skips the schedstat read.
std::tuple<int64_t, int64_t, int64_t> thread_times(int64_t clock, int fd) {
  timespec ts{};
  const bool ok = ::clock_gettime(static_cast<clockid_t>(clock), &ts) == 0;
  const int64_t now = openreg::trace::now_ns();
  const int64_t cpu = ok ? static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec : -1;
  return {now, cpu, fd >= 0 ? run_queue_ns(fd) : -1};
}

}  // namespace

void bind_host_times(py::module_& m) {
  m.def("_host_thread_times", &thread_times, py::arg("clock"), py::arg("fd"),
        "(monotonic ns, CPU clock ns or -1, run-queue ns or -1) of one thread, "
        "read without giving up the GIL.");
}

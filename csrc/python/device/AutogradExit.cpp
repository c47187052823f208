// Note [Autograd workers at exit]
// A backward on openreg runs on the autograd engine's worker thread for the
// device, which keeps the GraphTask until after it has woken the caller. That
// GraphTask captured the caller's ThreadLocalState, which in torch 2.13 holds a
// Python object (`_engine_run_backward` stashes a contextvars.Context in the
// TLS). So the worker may drop the last reference, and take the GIL, while the
// main thread is already finalizing Python: CPython then ends the worker with
// pthread_exit, whose forced unwind through a noexcept destructor calls
// std::terminate (SIGABRT at exit). CUDA takes the same path in torch; CPU does
// not (its backward runs on the calling thread).
//
// drain_autograd_workers(), called from a Python atexit handler (before
// finalization starts), releases the GIL and runs one tiny Python-free
// backward on every openreg device from a fresh C++ thread. A worker takes a
// task only after it has released the previous one, so once each probe has
// run no worker holds a GraphTask that needs Python; the probes' own
// GraphTasks hold no Python object (the fresh thread's TLS is empty).

#include "runtime/Device.h"
#include "runtime/DeviceAllocator.h"

#include <ATen/ATen.h>
#include <pybind11/pybind11.h>
#include <torch/csrc/autograd/autograd.h>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>

namespace py = pybind11;

namespace {

struct ProbeState {
  std::mutex mutex;
  std::condition_variable done_cv;
  bool done = false;
};

void run_probes(c10::DeviceIndex count) {
  for (c10::DeviceIndex d = 0; d < count; ++d) {
    const auto options =
        at::TensorOptions().device(c10::DeviceType::PrivateUse1, d).dtype(at::kFloat);
    at::Tensor leaf = at::zeros({1}, options).set_requires_grad(true);
    torch::autograd::backward({leaf}, {at::ones({1}, options)});
  }
}

bool any_device_used() {
  for (c10::DeviceIndex d = 0; d < openreg::device_count(); ++d) {
    if (openreg::device_allocator().getDeviceStats(d).num_device_alloc > 0) {
      return true;
    }
  }
  return false;
}

// Returns true when every probe ran within `timeout_s` seconds.
bool drain_autograd_workers(double timeout_s) {
  if (!any_device_used()) {
    return true;  // openreg never ran anything: no worker can hold its work
  }
  auto state = std::make_shared<ProbeState>();
  py::gil_scoped_release no_gil;  // the workers may need the GIL to finish
  std::thread([state, count = openreg::device_count()] {
    try {
      run_probes(count);
    } catch (...) {  // exit must stay clean whatever happens
    }
    std::lock_guard<std::mutex> lock(state->mutex);
    state->done = true;
    state->done_cv.notify_all();
  }).detach();
  std::unique_lock<std::mutex> lock(state->mutex);
  return state->done_cv.wait_for(lock, std::chrono::duration<double>(timeout_s),
                                 [&] { return state->done; });
}

}  // namespace

void bind_autograd_exit(py::module_& m) {
  m.def("_drain_autograd_workers", &drain_autograd_workers, py::arg("timeout_s") = 10.0,
        "Wait until autograd's openreg worker threads hold no graph task (see Note "
        "[Autograd workers at exit] in csrc/python/AutogradExit.cpp).");
}

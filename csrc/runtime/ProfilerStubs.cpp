// openreg as a device of torch.profiler: the PrivateUse1 profiler stubs.
//
// With torch.profiler.profile(activities=[CPU, PrivateUse1]) PyTorch's
// profiler asks these stubs for a device "event" at the start and end of each
// op and reports the time between them as the op's openreg (device) time,
// the way it uses CUDA events for CUDA. openreg executes synchronously on the
// host (Note [Synchronous execution]), so a device event is a reading of the
// device's clock (runtime/Clock.h, the recorder's too). It lives with the
// device it describes (the recorder's Kineto exporter,
// trace/KinetoProfiler.cpp, needs no device).

#include "runtime/Clock.h"
#include "runtime/Device.h"

#include <c10/core/DeviceGuard.h>
#include <c10/util/ApproximateClock.h>
#include <torch/csrc/profiler/stubs/base.h>

#include <memory>

namespace openreg {
namespace {

using torch::profiler::impl::ProfilerVoidEventStub;

struct Stubs final : torch::profiler::impl::ProfilerStubs {
  void record(c10::DeviceIndex* device, ProfilerVoidEventStub* event,
              int64_t* cpu_ns) const override {
    if (device != nullptr) {
      *device = current_device();
    }
    if (cpu_ns != nullptr) {
      *cpu_ns = c10::getTime();
    }
    *event = std::make_shared<int64_t>(now_ns());
  }
  // Microseconds between two events, as the CUDA stubs report.
  float elapsed(const ProfilerVoidEventStub* a, const ProfilerVoidEventStub* b) const override {
    const int64_t start = *static_cast<const int64_t*>(a->get());
    const int64_t end = *static_cast<const int64_t*>(b->get());
    return static_cast<float>(end - start) / 1000.0f;
  }
  void mark(const char* /*name*/) const override {}
  void rangePush(const char* /*name*/) const override {}
  void rangePop() const override {}
  bool enabled() const override {
    return true;
  }
  void onEachDevice(std::function<void(int)> op) const override {
    for (c10::DeviceIndex i = 0; i < device_count(); ++i) {
      c10::DeviceGuard guard(c10::Device(c10::DeviceType::PrivateUse1, i));
      op(i);
    }
  }
  void synchronize() const override {}  // nothing runs asynchronously
};

const bool registered = [] {
  static Stubs stubs;
  torch::profiler::impl::registerPrivateUse1Methods(&stubs);
  return true;
}();

}  // namespace
}  // namespace openreg

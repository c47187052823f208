#include "runtime/Event.h"

#include "runtime/Stream.h"

#include <c10/util/Exception.h>

#include <chrono>

namespace openreg {

void record_event(void** handle, const c10::Stream& stream, c10::DeviceIndex device,
                  c10::EventFlag flag) {
  check_stream(stream);
  TORCH_CHECK(device == -1 || device == stream.device_index(),
              "event recorded on openreg:", static_cast<int>(stream.device_index()),
              " but it belongs to openreg:", static_cast<int>(device));
  auto* event = static_cast<Event*>(*handle);
  if (event == nullptr) {
    event = new Event();
    event->device = stream.device_index();
    event->timing = flag == c10::EventFlag::BACKEND_DEFAULT;
    *handle = event;
  }
  TORCH_CHECK(
      event->device == stream.device_index(),
      "event belongs to openreg:", static_cast<int>(event->device),
      " and cannot be recorded on a stream of openreg:", static_cast<int>(stream.device_index()));
  event->stream = stream.id();
  event->recorded = true;
  event->time_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                       std::chrono::steady_clock::now().time_since_epoch())
                       .count();
}

void destroy_event(void* handle) noexcept {
  delete static_cast<Event*>(handle);
}

double elapsed_ms(void* start, void* end) {
  auto* a = static_cast<Event*>(start);
  auto* b = static_cast<Event*>(end);
  TORCH_CHECK_VALUE(a != nullptr && b != nullptr && a->recorded && b->recorded,
                    "Both events must be recorded before calculating elapsed time.");
  TORCH_CHECK_VALUE(a->timing && b->timing,
                    "Both events must be created with argument 'enable_timing=True'.");
  // CUDA cannot time events of two devices (cudaEventElapsedTime fails):
  // neither can openreg, whose devices share no clock in the model.
  TORCH_CHECK(a->device == b->device,
              "elapsed_time: the events were recorded on different devices, openreg:",
              static_cast<int>(a->device), " and openreg:", static_cast<int>(b->device),
              "; as on CUDA, both events must be recorded on the same device");
  return static_cast<double>(b->time_ns - a->time_ns) / 1e6;
}

}  // namespace openreg

#include "runtime/Stream.h"

#include "runtime/Device.h"

#include <c10/util/Exception.h>

#include <array>
#include <mutex>
#include <vector>

namespace openreg {
namespace {

struct StreamRegistry {
  std::mutex mutex;
  // priorities[device][id]: the priority each created stream was given.
  std::array<std::vector<int>, kMaxDevices> priorities;

  StreamRegistry() {
    for (auto& p : priorities) {
      p.push_back(0);  // the default stream
    }
  }
};

StreamRegistry& registry() {
  static StreamRegistry* r = new StreamRegistry();
  return *r;
}

thread_local std::array<c10::StreamId, kMaxDevices> tls_current{};

c10::Stream make(c10::DeviceIndex device, c10::StreamId id) {
  return c10::Stream(c10::Stream::UNSAFE, c10::Device(c10::DeviceType::PrivateUse1, device), id);
}

}  // namespace

c10::Stream default_stream(c10::DeviceIndex device) {
  check_device_index(device);
  return make(device, kDefaultStreamId);
}

c10::Stream new_stream(c10::DeviceIndex device, int priority) {
  check_device_index(device);
  mark_initialized();  // Note [Lazy initialisation] in Device.h
  TORCH_CHECK_VALUE(priority == 0 || priority == -1,
                    "openreg stream priority must be 0 (default) or -1 (high), got ", priority);
  StreamRegistry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto& list = r.priorities[device];
  list.push_back(priority);
  return make(device, static_cast<c10::StreamId>(list.size() - 1));
}

c10::Stream current_stream(c10::DeviceIndex device) {
  check_device_index(device);
  return make(device, tls_current[device]);
}

c10::Stream exchange_stream(c10::Stream stream) {
  check_stream(stream);
  const c10::DeviceIndex device = stream.device_index();
  c10::Stream previous = make(device, tls_current[device]);
  tls_current[device] = stream.id();
  return previous;
}

void check_stream(const c10::Stream& stream) {
  TORCH_CHECK(stream.device_type() == c10::DeviceType::PrivateUse1,
              "expected an openreg stream, got a stream on ", stream.device());
  check_device_index(stream.device_index());
  StreamRegistry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  const auto& list = r.priorities[stream.device_index()];
  TORCH_CHECK_VALUE(stream.id() >= 0 && static_cast<size_t>(stream.id()) < list.size(),
                    "openreg:", static_cast<int>(stream.device_index()), " has no stream with id ",
                    stream.id(), ": create streams with torch.openreg.Stream()");
}

int stream_priority(const c10::Stream& stream) {
  check_stream(stream);
  StreamRegistry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  return r.priorities[stream.device_index()][stream.id()];
}

}  // namespace openreg

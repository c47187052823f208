// The device guard: how PyTorch switches openreg's current device and stream
// (c10::DeviceGuard, torch.openreg.device(i), torch.accelerator, events), and
// what torch.accelerator.get_device_capability() reports.
//
// A device without an index (torch.Stream(device="openreg"), index -1) means
// the current device, as on CUDA.

#include "runtime/Device.h"
#include "runtime/Event.h"
#include "runtime/Stream.h"

#include <c10/core/DeviceCapability.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>

namespace openreg {
namespace {

constexpr auto kType = c10::DeviceType::PrivateUse1;

void check_type(const c10::Device& d) {
  TORCH_CHECK(d.type() == kType, "expected an openreg device, got ", d);
}

struct GuardImpl final : public c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override {
    return kType;
  }

  c10::Device exchangeDevice(c10::Device d) const override {
    check_type(d);
    return {kType, exchange_device(d.index())};
  }

  c10::Device getDevice() const override {
    return {kType, current_device()};
  }

  void setDevice(c10::Device d) const override {
    check_type(d);
    set_device(d.index());
  }

  void uncheckedSetDevice(c10::Device d) const noexcept override {
    if (d.index() >= 0 && d.index() < device_count()) {
      set_device(d.index());
    }
  }

  c10::Stream getStream(c10::Device d) const override {
    return current_stream(resolve_device_index(d.index()));
  }

  c10::Stream getDefaultStream(c10::Device d) const override {
    return default_stream(resolve_device_index(d.index()));
  }

  c10::Stream getStreamFromGlobalPool(c10::Device d, bool high_priority) const override {
    return new_stream(resolve_device_index(d.index()), high_priority ? -1 : 0);
  }

  c10::Stream getNewStream(c10::Device d, int priority) const override {
    return new_stream(resolve_device_index(d.index()), priority);
  }

  c10::Stream exchangeStream(c10::Stream s) const override {
    return exchange_stream(s);
  }

  c10::DeviceIndex deviceCount() const noexcept override {
    return device_count();
  }

  // Every dtype an openreg tensor can hold and copy to and from the host: all
  // but the ones the host's copy kernel has no case for (the sub-byte integers
  // and the packed quantized types). tests/device/test_accelerator_corners.py copies
  // each reported dtype both ways.
  c10::DeviceCapability getDeviceCapability(c10::Device d) const override {
    resolve_device_index(d.index());
    c10::DeviceCapability cap;  // every dtype
    for (c10::ScalarTypeIndex unsupported :
         {c10::kIndex_QUInt4x2, c10::kIndex_QUInt2x4, c10::kIndex_UInt1, c10::kIndex_UInt2,
          c10::kIndex_UInt3, c10::kIndex_UInt4, c10::kIndex_UInt5, c10::kIndex_UInt6,
          c10::kIndex_UInt7, c10::kIndex_Int1, c10::kIndex_Int2, c10::kIndex_Int3, c10::kIndex_Int4,
          c10::kIndex_Int5, c10::kIndex_Int6, c10::kIndex_Int7}) {
      cap.capability_data.capability_bits &= ~(uint64_t{1} << unsupported);
    }
    return cap;
  }

  // Streams and events: see Note [Synchronous execution] in Stream.h.
  void record(void** event, const c10::Stream& stream, const c10::DeviceIndex device_index,
              const c10::EventFlag flag) const override {
    record_event(event, stream, device_index, flag);
  }

  void block(void* /*event*/, const c10::Stream& stream) const override {
    check_stream(stream);
  }

  bool queryEvent(void* /*event*/) const override {
    return true;
  }

  void destroyEvent(void* event, const c10::DeviceIndex /*device_index*/) const noexcept override {
    destroy_event(event);
  }

  bool queryStream(const c10::Stream& stream) const override {
    check_stream(stream);
    return true;
  }

  void synchronizeStream(const c10::Stream& stream) const override {
    check_stream(stream);
  }

  void synchronizeEvent(void* /*event*/) const override {}

  void synchronizeDevice(const c10::DeviceIndex device_index) const override {
    check_device_index(device_index);
  }

  double elapsedTime(void* event1, void* event2,
                     const c10::DeviceIndex /*device_index*/) const override {
    return elapsed_ms(event1, event2);
  }
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, GuardImpl);

}  // namespace
}  // namespace openreg

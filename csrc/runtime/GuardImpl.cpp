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

  // The dtypes an openreg tensor can be created with, copied to and from the
  // host, and computed with as on the CPU. The first ten compute in openreg's
  // own kernels (arithmetic, reductions, ...); the others only through the
  // CPU fallback (complex numbers, float8, the wide unsigned integers,
  // quantized tensors). Left out: the bit containers (bits8, ...) and
  // float4_e2m1fn_x2, which nothing computes with, not even on the CPU, and
  // the sub-byte integers and packed quantized types, which cannot be copied.
  // tests/device/test_accelerator_corners.py checks each dtype.
  c10::DeviceCapability getDeviceCapability(c10::Device d) const override {
    resolve_device_index(d.index());
    c10::DeviceCapability cap;
    cap.capability_data.capability_bits = 0;
    for (c10::ScalarTypeIndex supported :
         {// native kernels
          c10::kIndex_Float, c10::kIndex_Double, c10::kIndex_Half, c10::kIndex_BFloat16,
          c10::kIndex_Bool, c10::kIndex_Byte, c10::kIndex_Char, c10::kIndex_Short, c10::kIndex_Int,
          c10::kIndex_Long,
          // through the CPU fallback
          c10::kIndex_ComplexHalf, c10::kIndex_ComplexFloat, c10::kIndex_ComplexDouble,
          c10::kIndex_Float8_e5m2, c10::kIndex_Float8_e4m3fn, c10::kIndex_Float8_e5m2fnuz,
          c10::kIndex_Float8_e4m3fnuz, c10::kIndex_Float8_e8m0fnu, c10::kIndex_UInt16,
          c10::kIndex_UInt32, c10::kIndex_UInt64, c10::kIndex_QInt8, c10::kIndex_QUInt8,
          c10::kIndex_QInt32}) {
      cap.capability_data.capability_bits |= uint64_t{1} << supported;
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

// The PrivateUse1 hooks: how ATen asks openreg for generators, pinned memory,
// the device behind a pointer, the device count and storage resizing. Also
// registers the device and pinned-host allocators. Everything here forwards to
// the runtime; nothing is decided in this file.

#include "runtime/Device.h"
#include "runtime/DeviceAllocator.h"
#include "runtime/Generator.h"
#include "runtime/HostAllocator.h"

#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/StorageImpl.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstring>

namespace openreg {
namespace {

struct Hooks final : public at::PrivateUse1HooksInterface {
  bool isBuilt() const override {
    return true;
  }

  bool isAvailable() const override {
    return device_count() > 0;
  }

  // Note [Lazy initialisation] in Device.h.
  void init() const override {
    mark_initialized();
  }

  bool hasPrimaryContext(c10::DeviceIndex device) const override {
    check_device_index(device);
    return true;
  }

  c10::DeviceIndex deviceCount() const override {
    return device_count();
  }

  void setCurrentDevice(c10::DeviceIndex device) const override {
    set_device(device);
  }

  c10::DeviceIndex getCurrentDevice() const override {
    return current_device();
  }

  c10::DeviceIndex exchangeDevice(c10::DeviceIndex device) const override {
    return exchange_device(device);
  }

  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex device) const override {
    return exchange_device(device);
  }

  const at::Generator& getDefaultGenerator(c10::DeviceIndex device) const override {
    return default_generator(device);
  }

  at::Generator getNewGenerator(c10::DeviceIndex device) const override {
    return new_generator(device);
  }

  at::Device getDeviceFromPtr(void* data) const override {
    auto device = device_allocator().device_of(data);
    TORCH_CHECK(device.has_value(), "the pointer ", data,
                " does not point into openreg device memory");
    return {c10::DeviceType::PrivateUse1, *device};
  }

  bool isPinnedPtr(const void* data) const override {
    return host_allocator().is_pinned(data);
  }

  at::Allocator* getPinnedMemoryAllocator() const override {
    return &host_allocator();
  }

  // UntypedStorage.resize_() on an openreg storage.
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const override {
    c10::StorageImpl* impl = storage.unsafeGetStorageImpl();
    TORCH_CHECK(impl->resizable(), "Trying to resize storage that is not resizable");
    c10::DeviceGuard guard(impl->device());
    c10::DataPtr fresh = device_allocator().allocate(newsize);
    const size_t keep = std::min(newsize, impl->nbytes());
    if (keep > 0) {
      std::memcpy(fresh.get(), impl->data(), keep);
    }
    impl->set_data_ptr_noswap(std::move(fresh));
    impl->set_nbytes(newsize);
  }
};

struct HooksRegistration {
  HooksRegistration() {
    static Hooks hooks;
    at::RegisterPrivateUse1HooksInterface(&hooks);
    c10::SetAllocator(c10::DeviceType::PrivateUse1, &device_allocator());
    at::setHostAllocator(c10::DeviceType::PrivateUse1, &host_allocator());
  }
};

const HooksRegistration hooks_registration;

}  // namespace
}  // namespace openreg

#pragma once

// The simulated devices: how many there are and which one this thread uses.
//
// openreg simulates `device_count()` accelerators whose memory lives in host
// RAM. The count comes from OPENREG_DEVICE_COUNT (default 2), fixed for the
// process once a valid value has been read:
// Note [The device count is fixed at its first valid reading] in Device.cpp.
// Like CUDA, the current device is per thread and starts at 0.

#include <c10/core/Device.h>

#include <string>

namespace openreg {

constexpr c10::DeviceIndex kMaxDevices = 16;

// Number of simulated devices. Never throws; see check_config().
c10::DeviceIndex device_count() noexcept;

// Throws if OPENREG_DEVICE_COUNT holds something other than 1..kMaxDevices,
// or (once the count is fixed) another count than the fixed one; otherwise
// fixes the count. The import calls it before anything reads the count.
void check_config();

// Throws unless 0 <= index < count: a c10::AcceleratorError (a RuntimeError in
// Python, torch.AcceleratorError) worded as CUDA's "invalid device ordinal",
// naming the valid range and how to get more devices, then as the reference
// PrivateUse1 backend's (PyTorch's test OpenReg): "The device index is out of
// range", with the range as [0, count).
void check_device_index(c10::DeviceIndex index);

// The error of check_device_index() for an index given as text (it may not fit
// a c10::DeviceIndex: Python's 2**64).
[[noreturn]] void throw_invalid_device(const std::string& index);

// `index`, or the current device when it is -1 (a device given without an
// index, as torch.Stream(device="openreg")), checked.
c10::DeviceIndex resolve_device_index(c10::DeviceIndex index);

c10::DeviceIndex current_device() noexcept;
void set_device(c10::DeviceIndex index);

// Note [Lazy initialisation]
// openreg has nothing to set up, but like CUDA it reports whether the device
// has been used: torch.openreg.is_initialized() is false after import and
// becomes true at the first use (a tensor created on openreg, which makes
// torch call torch.openreg._lazy_init(); set_device; a stream). DeviceMesh
// relies on it: it picks the device from LOCAL_RANK only while the device is
// not initialised. mark_initialized() is one relaxed store.
void mark_initialized() noexcept;
bool is_initialized() noexcept;

// Sets the current device and returns the previous one.
c10::DeviceIndex exchange_device(c10::DeviceIndex index);

// Parses a byte count such as "4096", "512MiB", "2GiB" or "1.5G" (units are
// binary: K = KiB = 1024; a fraction of a unit is rounded down to whole bytes).
// Returns false when `text` is not a size, or is a fraction of a byte, or is
// 2**63 bytes or more.
bool parse_bytes(const char* text, size_t* out);

}  // namespace openreg

#pragma once

// The simulated devices: how many there are and which one this thread uses.
//
// openreg simulates `device_count()` accelerators whose memory lives in host
// RAM. The count is read once from OPENREG_DEVICE_COUNT (default 2). Like
// CUDA, the current device is per thread and starts at 0.

#include <c10/core/Device.h>

namespace openreg {

constexpr c10::DeviceIndex kMaxDevices = 16;

// Number of simulated devices. Never throws; see check_config().
c10::DeviceIndex device_count() noexcept;

// Throws if OPENREG_DEVICE_COUNT holds something other than 1..kMaxDevices.
void check_config();

// Throws an IndexError naming the valid range unless 0 <= index < count.
void check_device_index(c10::DeviceIndex index);

c10::DeviceIndex current_device() noexcept;
void set_device(c10::DeviceIndex index);

// Sets the current device and returns the previous one.
c10::DeviceIndex exchange_device(c10::DeviceIndex index);

// Parses a byte count such as "4096", "512MiB", "2GiB" or "1.5G" (units are
// binary: K = KiB = 1024; a fraction of a unit is rounded down to whole bytes).
// Returns false when `text` is not a size, or is a fraction of a byte, or is
// 2**63 bytes or more.
bool parse_bytes(const char* text, size_t* out);

}  // namespace openreg

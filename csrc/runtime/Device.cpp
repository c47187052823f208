#include "runtime/Device.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

namespace openreg {
namespace {

// One reading of OPENREG_DEVICE_COUNT: the count, or why the value is not one.
struct Reading {
  c10::DeviceIndex count = 2;
  std::string text;   // the value ("" when unset)
  std::string error;  // non-empty when the value is not a device count
};

Reading read_count() {
  Reading r;
  const char* env = std::getenv("OPENREG_DEVICE_COUNT");
  if (env == nullptr || *env == '\0') {
    return r;
  }
  r.text = env;
  char* end = nullptr;
  long value = std::strtol(env, &end, 10);
  if (*end != '\0' || value < 1 || value > kMaxDevices) {
    r.error = std::string("OPENREG_DEVICE_COUNT='") + env +
              "' is not a device count: set it to a whole number from 1 to " +
              std::to_string(kMaxDevices) + " (or unset it for the default, 2)";
    return r;
  }
  r.count = static_cast<c10::DeviceIndex>(value);
  return r;
}

// Note [The device count is fixed at its first valid reading]
// Per-device state (the default generators, the allocator's statistics) is
// sized by the count, so once a valid OPENREG_DEVICE_COUNT has been read the
// count is fixed for the process. An invalid value is not kept: it fails the
// import (check_config), nothing reads the count before that (the package
// validates first: openreg_lab/_extension.py), and the next import reads the
// variable again. So after torch's autoload failed on a bad value, setting a
// good one and importing openreg_lab works. A different value after the count
// was fixed cannot be honoured: check_config says a restart is needed.
std::mutex fixed_mutex;
std::atomic<c10::DeviceIndex> fixed_count{0};  // 0: not fixed yet

c10::DeviceIndex fix_count(c10::DeviceIndex count) {
  std::lock_guard<std::mutex> lock(fixed_mutex);
  if (fixed_count.load(std::memory_order_relaxed) == 0) {
    fixed_count.store(count, std::memory_order_release);
  }
  return fixed_count.load(std::memory_order_relaxed);
}

thread_local c10::DeviceIndex tls_current_device = 0;

std::atomic<bool> initialized{false};

// CUDA's error code for the same error (cudaErrorInvalidDevice), so that
// handlers reading torch.AcceleratorError.error_code see the same number.
constexpr int32_t kInvalidDevice = 101;

}  // namespace

c10::DeviceIndex device_count() noexcept {
  const c10::DeviceIndex fixed = fixed_count.load(std::memory_order_acquire);
  if (C10_LIKELY(fixed > 0)) {
    return fixed;
  }
  const Reading r = read_count();
  return r.error.empty() ? fix_count(r.count) : r.count;
}

void check_config() {
  const Reading r = read_count();
  const c10::DeviceIndex fixed = fixed_count.load(std::memory_order_acquire);
  if (fixed > 0) {
    // Note [The device count is fixed at its first valid reading]
    TORCH_CHECK(r.error.empty() && r.count == fixed, "OPENREG_DEVICE_COUNT='", r.text,
                "' cannot take effect: this process fixed openreg's device count at ",
                static_cast<int>(fixed),
                " when an earlier import of openreg_lab read it; restart Python to use a new "
                "value");
    return;
  }
  TORCH_CHECK(r.error.empty(), r.error);
  fix_count(r.count);
}

void check_device_index(c10::DeviceIndex index) {
  if (C10_LIKELY(index >= 0 && index < device_count())) {
    return;
  }
  throw_invalid_device(std::to_string(static_cast<int>(index)));
}

void throw_invalid_device(const std::string& index) {
  throw c10::AcceleratorError(
      {__func__, __FILE__, static_cast<uint32_t>(__LINE__)}, kInvalidDevice,
      c10::str("openreg error: invalid device ordinal (openreg device index ", index,
               " is out of range: valid indices are 0 to ", device_count() - 1, "; ",
               static_cast<int>(device_count()),
               " devices, set OPENREG_DEVICE_COUNT before importing openreg_lab for more). The "
               "device index is out of range: it must be in [0, ",
               static_cast<int>(device_count()), "), but got ", index, "."));
}

c10::DeviceIndex resolve_device_index(c10::DeviceIndex index) {
  if (index == -1) {
    return tls_current_device;
  }
  check_device_index(index);
  return index;
}

void mark_initialized() noexcept {
  initialized.store(true, std::memory_order_relaxed);
}

bool is_initialized() noexcept {
  return initialized.load(std::memory_order_relaxed);
}

c10::DeviceIndex current_device() noexcept {
  return tls_current_device;
}

void set_device(c10::DeviceIndex index) {
  check_device_index(index);
  tls_current_device = index;
  mark_initialized();
}

c10::DeviceIndex exchange_device(c10::DeviceIndex index) {
  c10::DeviceIndex previous = tls_current_device;
  if (index != previous) {
    set_device(index);
  }
  return previous;
}

bool parse_bytes(const char* text, size_t* out) {
  char* end = nullptr;
  double value = std::strtod(text, &end);
  if (end == text || !(value >= 0) || !std::isfinite(value)) {
    return false;
  }
  std::string unit(end);
  double scale = 1;
  if (unit.empty() || unit == "B") {
    scale = 1;
  } else if (unit == "K" || unit == "KiB") {
    scale = 1024.0;
  } else if (unit == "M" || unit == "MiB") {
    scale = 1024.0 * 1024;
  } else if (unit == "G" || unit == "GiB") {
    scale = 1024.0 * 1024 * 1024;
  } else {
    return false;
  }
  // Whole bytes, and at most 2**63 - 1: the statistics are int64 (a unit may
  // make a fraction: 1.5G is whole, 1.5 bytes is not). Plain digits are read
  // exactly: a double would round 2**63 - 1 up.
  constexpr unsigned long long kMax = 9223372036854775807ULL;
  if (scale == 1 && std::all_of(text, static_cast<const char*>(end),
                                [](char c) { return c >= '0' && c <= '9'; })) {
    errno = 0;
    const unsigned long long n = std::strtoull(text, nullptr, 10);
    if (errno == ERANGE || n > kMax) {
      return false;
    }
    *out = static_cast<size_t>(n);
    return true;
  }
  const double bytes = std::floor(value * scale);
  if (bytes >= 9223372036854775808.0 || (scale == 1 && bytes != value)) {
    return false;
  }
  *out = static_cast<size_t>(bytes);
  return true;
}

}  // namespace openreg

#include "runtime/Device.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>

namespace openreg {
namespace {

struct DeviceConfig {
  c10::DeviceIndex count = 2;
  std::string error;  // non-empty when the environment variable is invalid
};

const DeviceConfig& config() {
  static const DeviceConfig cfg = [] {
    DeviceConfig c;
    const char* env = std::getenv("OPENREG_DEVICE_COUNT");
    if (env == nullptr || *env == '\0') {
      return c;
    }
    char* end = nullptr;
    long value = std::strtol(env, &end, 10);
    if (*end != '\0' || value < 1 || value > kMaxDevices) {
      c.error = std::string("OPENREG_DEVICE_COUNT='") + env +
                "' is not a device count: set it to a whole number from 1 to " +
                std::to_string(kMaxDevices) + " (or unset it for the default, 2)";
      return c;
    }
    c.count = static_cast<c10::DeviceIndex>(value);
    return c;
  }();
  return cfg;
}

thread_local c10::DeviceIndex tls_current_device = 0;

std::atomic<bool> initialized{false};

// CUDA's error code for the same error (cudaErrorInvalidDevice), so that
// handlers reading torch.AcceleratorError.error_code see the same number.
constexpr int32_t kInvalidDevice = 101;

}  // namespace

c10::DeviceIndex device_count() noexcept {
  return config().count;
}

void check_config() {
  TORCH_CHECK(config().error.empty(), config().error);
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
               " devices, set OPENREG_DEVICE_COUNT before importing openreg_lab for more)"));
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

#include "trace/ProfilerWork.h"

#include <atomic>

namespace openreg::trace {
namespace {

std::atomic<DeviceWorkProvider> g_work_provider{nullptr};

}  // namespace

void set_device_work_provider(DeviceWorkProvider provider) {
  g_work_provider.store(provider);
}

DeviceWork device_work(const SessionResult& session) {
  const DeviceWorkProvider provider = g_work_provider.load();
  if (provider == nullptr) {
    DeviceWork none;
    none.error = "openreg_lab is not loaded: no device work";
    return none;
  }
  return provider(session);
}

}  // namespace openreg::trace

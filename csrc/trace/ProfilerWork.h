#pragma once

// openreg's device work for torch.profiler's trace, as the lab's Python
// computes it (openreg_lab/recording/profiler_work.py: the computation of the
// lab's own Kineto export) for KinetoProfiler.cpp (Note [openreg's work in
// torch.profiler's trace]). The recorder knows nothing of Python: the
// bindings (python/ProfilerWork.cpp) set the provider when openreg_lab loads.

#include "trace/Recorder.h"

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace openreg::trace {

// One kernel, memcpy or communication kernel; times on the recorder's clock.
struct WorkItem {
  std::string name;
  std::string kernel;    // how its op ran ("native", "generic"), "" for other work
  std::string dispatch;  // its op's dispatch path, "" for other work
  bool memcpy = false;
  int32_t device = 0;
  int32_t stream = 0;
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  int64_t bytes = 0;
  // The event that launched it: its thread and position in that thread's
  // buffer (ThreadEvents::first on).
  int32_t thread = 0;
  int64_t position = 0;
};

struct DeviceWork {
  std::vector<WorkItem> items;
  std::vector<std::string> device_properties;             // JSON objects
  std::unordered_map<std::string, std::string> metadata;  // key -> JSON value
  std::string error;  // why there is no work (no provider, or it failed)
};

using DeviceWorkProvider = DeviceWork (*)(const SessionResult&);

void set_device_work_provider(DeviceWorkProvider provider);

// The provider's work for `session`, or a DeviceWork that says why none.
DeviceWork device_work(const SessionResult& session);

}  // namespace openreg::trace

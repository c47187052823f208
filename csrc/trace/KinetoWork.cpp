#include "trace/KinetoWork.h"

#include "trace/KinetoText.h"
#include "trace/ProfilerLinks.h"

#include <GenericTraceActivity.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <utility>

namespace openreg::trace {
namespace {

constexpr int64_t kMicrosecond = 1000;
// Device tracks after the host's in the trace viewer, as Kineto sorts GPUs.
constexpr int64_t kDeviceSortIndex = 0x1000000;

// Times of Kineto's clock (nanoseconds since the epoch) to whole microseconds
// (Note [openreg's work in torch.profiler's trace]).
int64_t nearest_us(int64_t ns) {
  return (ns + kMicrosecond / 2) / kMicrosecond * kMicrosecond;
}
int64_t ceil_us(int64_t ns) {
  return (ns + kMicrosecond - 1) / kMicrosecond * kMicrosecond;
}
int64_t floor_us(int64_t ns) {
  return ns / kMicrosecond * kMicrosecond;
}

// The activities outlive the session (Kineto keeps copies until the trace is
// saved): their span is not the session's.
const libkineto::TraceSpan& work_span() {
  static const libkineto::TraceSpan span{0, 0, "openreg"};
  return span;
}

// A zero-length launch on its op's thread: at the work's start, moved inside
// the op torch.profiler recorded when it is not.
int64_t launch_time(int64_t work_start, const libkineto::ITraceActivity* op) {
  if (op == nullptr) {
    return work_start;
  }
  const int64_t first = ceil_us(op->timestamp());
  const int64_t last = floor_us(op->timestamp() + op->duration());
  return first <= last ? std::clamp(work_start, first, last) : work_start;
}

}  // namespace

void log_device_work(libkineto::ActivityLogger& logger, const DeviceWork& work,
                     const SessionResult& session,
                     const std::unordered_map<uint64_t, uint64_t>& links,
                     const libkineto::getLinkedActivityCallback& linked, int64_t offset,
                     int64_t time) {
  std::unordered_map<int32_t, uint64_t> os_thread;
  for (const ThreadEvents& t : session.threads) {
    os_thread[t.thread] = t.os_thread;
  }
  const auto pid = static_cast<int32_t>(::getpid());
  std::set<std::pair<int32_t, int32_t>> tracks;  // (device, stream)
  int32_t correlation = 0;
  for (const WorkItem& w : work.items) {
    ++correlation;
    const libkineto::ITraceActivity* op = nullptr;
    auto link = links.find(event_key(w.thread, w.position));
    if (link != links.end() && linked) {
      op = linked(static_cast<int32_t>(link->second));
    }
    const int64_t start = nearest_us(w.start_ns + offset);
    const int64_t end = std::max(start, nearest_us(w.end_ns + offset));

    libkineto::GenericTraceActivity device_side(
        work_span(),
        w.memcpy ? libkineto::ActivityType::GPU_MEMCPY : libkineto::ActivityType::CONCURRENT_KERNEL,
        kineto_text(w.name));
    device_side.startTime = start;
    device_side.endTime = end;
    device_side.device = w.device;
    device_side.resource = w.stream;
    device_side.id = correlation;
    device_side.linked = op;  // its "External id"
    device_side.flow.id = static_cast<uint32_t>(correlation);
    device_side.flow.type = libkineto::kLinkAsyncCpuGpu;
    device_side.flow.start = 0;
    device_side.addMetadata("device", w.device);
    device_side.addMetadata("stream", w.stream);
    device_side.addMetadata("correlation", correlation);
    if (!w.kernel.empty()) {
      device_side.addMetadataQuoted("kernel", kineto_text(w.kernel));
      device_side.addMetadataQuoted("dispatch", kineto_text(w.dispatch));
    }
    if (w.memcpy) {
      device_side.addMetadata("bytes", w.bytes);
      const int64_t ns = w.end_ns - w.start_ns;
      const double gb_per_s = ns > 0 ? static_cast<double>(w.bytes) / static_cast<double>(ns) : 0.0;
      device_side.addMetadata("memory bandwidth (GB/s)", std::round(gb_per_s * 1000.0) / 1000.0);
    }
    logger.handleGenericActivity(device_side);
    tracks.emplace(w.device, w.stream);

    auto thread = os_thread.find(w.thread);
    const auto tid = static_cast<int32_t>(thread == os_thread.end() ? 0 : thread->second);
    libkineto::GenericTraceActivity launch(work_span(), libkineto::ActivityType::CUDA_RUNTIME,
                                           w.memcpy ? "cudaMemcpyAsync" : "cudaLaunchKernel");
    launch.startTime = launch.endTime = launch_time(start, op);
    launch.device = pid;
    launch.resource = tid;
    launch.threadId = tid;
    launch.id = correlation;
    launch.linked = op;
    launch.flow.id = static_cast<uint32_t>(correlation);
    launch.flow.type = libkineto::kLinkAsyncCpuGpu;
    launch.flow.start = 1;
    launch.addMetadata("correlation", correlation);
    logger.handleGenericActivity(launch);
  }
  std::set<int32_t> named;
  for (const auto& [device, stream] : tracks) {
    if (named.insert(device).second) {
      logger.handleDeviceInfo(
          {device, kDeviceSortIndex + device, "openreg " + std::to_string(device),
           "openreg:" + std::to_string(device)},
          time);
    }
    logger.handleResourceInfo({stream, stream, device, "stream " + std::to_string(stream)}, time);
  }
}

}  // namespace openreg::trace

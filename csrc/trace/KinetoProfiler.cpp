// openreg as a device of torch.profiler (Kineto): a PrivateUse1 activity
// profiler. With torch.profiler.profile(activities=[..., PrivateUse1]) Kineto
// starts a session here with the profile; it opens a recorder session
// (Recorder.h) and, when the profile ends, hands Kineto openreg's device work
// (Note [openreg's work in torch.profiler's trace]).
//
// Note [openreg's work in torch.profiler's trace]
// A torch.profiler trace of an openreg run holds, beside torch's own events,
// what a CUDA job's holds beside them, so that Holistic Trace Analysis (HTA)
// and other tools written for such traces read it:
// * openreg's device work, the work the lab's own Kineto export writes
//   (Note [openreg's work as Kineto's device activity] in
//   recording/kineto.py): the session hands its events to the lab's Python
//   (ProfilerWork.h: recording/profiler_work.py runs device_work.py), which
//   returns the kernels (a kernel op's self-time stretches, Inductor's
//   generated kernels), the memcpys ("Memcpy HtoD", ...) and the
//   communication kernels ("ncclKernel_allreduce (ogloo)"), with their
//   names, devices and streams. Each is a "kernel" or "gpu_memcpy" activity
//   on its device (pid, named "openreg N") and stream (tid), with a
//   "correlation" id shared with a zero-length launch ("cuda_runtime", named
//   cudaLaunchKernel or cudaMemcpyAsync: what HTA's launch statistics read)
//   on the thread of the op that asked for it, and an "ac2g" flow from the
//   launch to the work. Both carry the External id of that op's cpu_op, found
//   by Note [Which torch.profiler op launched openreg's work]
//   (ProfilerLinks.h); work whose op torch.profiler did not record has none.
//   A kernel's args also say how its op ran ("kernel": "native" or
//   "generic") and its dispatch path.
// * Times are whole microseconds of Kineto's clock, as in the lab's export:
//   HTA rounds a fractional start up and a fractional end down (a loss of up
//   to 2 us a kernel), so each start and end is rounded to the nearest
//   microsecond instead. The recorder's event opens before torch.profiler's
//   cpu_op (its callback runs first: 1-2 us in the tests' training step), so a
//   launch at its work's start would fall before its op, where HTA's call
//   stacks would give its kernel to the enclosing op: a launch is moved to
//   the op's first whole microsecond then, after its work starts (a viewer
//   may not draw that flow's arrow, which runs back in time), unless the op
//   holds no whole microsecond (a view op of 0.5 us).
// * The devices in "deviceProperties", the lab's "openreg" metadata (events
//   dropped, capacity) and, when no process group is initialized,
//   "distributedInfo" (rank 0 of 1, or the job's rank: torch.profiler writes
//   its own when a group is), so HTA finds the rank as in the lab's export.
// The recorder's other events (fallbacks, copies, casts, allocations, marks,
// the ops themselves) are not in it: they were, as "privateuse1_runtime"
// activities, and HTA counts every event off a device stream as a CPU op, so
// its CPU views (trace diff, op counts) counted each op twice. The lab's own
// exports (Trace.to_kineto, export_chrome_trace) have them.
// Every name and text passes Note [Text in Kineto's JSON] (KinetoText.h).

// Kineto's plugin interface is only declared when USE_KINETO is set; torch's
// own build sets it. Only this file sees it.
#ifndef USE_KINETO
#define USE_KINETO
#endif

#include "trace/Clock.h"
#include "trace/Intern.h"
#include "trace/KinetoWork.h"
#include "trace/ProfilerLinks.h"
#include "trace/ProfilerWork.h"
#include "trace/Recorder.h"

#include <c10/util/ApproximateClock.h>
#include <torch/csrc/profiler/standalone/privateuse1_profiler.h>

#include <IActivityProfiler.h>
#include <libkineto.h>
#include <output_base.h>

#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace openreg::trace {
namespace {

constexpr uint64_t kCapacity = 1 << 22;

class KinetoSession final : public libkineto::IActivityProfilerSession {
 public:
  void start() override {
    id_ = open_session(kCapacity, {});
    links_.start();
    status_ = libkineto::TraceStatus::RECORDING;
  }

  void stop() override {
    links_.stop();
    if (id_ != 0) {
      result_ = close_session(id_);
      id_ = 0;
    }
    status_ = libkineto::TraceStatus::PROCESSING;
  }

  // Note [Which torch.profiler op launched openreg's work]
  void pushCorrelationId(uint64_t id) override {
    links_.push(id);
  }

  std::vector<std::string> errors() override {
    std::vector<std::string> out;
    if (result_.dropped != 0) {
      out.push_back("openreg dropped " + std::to_string(result_.dropped) + " events (capacity " +
                    std::to_string(kCapacity) + ")");
    }
    if (work_ && !work_->error.empty()) {
      out.push_back("openreg's device work: " + work_->error);
    }
    return out;
  }

  std::string getDeviceProperties() override {
    std::string out;
    for (const std::string& device : work().device_properties) {
      out += (out.empty() ? "" : ",") + device;
    }
    return out;
  }

  std::unordered_map<std::string, std::string> getMetadata() override {
    return work().metadata;
  }

  void processTrace(libkineto::ActivityLogger& logger) override {
    processTrace(logger, nullptr, 0, 0);
  }

  void processTrace(libkineto::ActivityLogger& logger, libkineto::getLinkedActivityCallback linked,
                    int64_t start_time, int64_t /*end_time*/) override {
    const std::vector<std::string> strings = interned_strings(0);
    // Kineto's times are c10::getTime(); the recorder's are steady_clock.
    const int64_t offset = c10::getTime() - now_ns();
    std::unordered_map<uint64_t, uint64_t> links;
    if (linked) {
      links = links_.resolve(result_, strings, [&](uint64_t id) {
        const libkineto::ITraceActivity* op = linked(static_cast<int32_t>(id));
        return op == nullptr ? std::string() : op->name();
      });
    }
    log_device_work(logger, work(), result_, links, linked, offset,
                    start_time != 0 ? start_time : c10::getTime());
    status_ = libkineto::TraceStatus::READY;
  }

  // The devices and streams are named with the work (KinetoWork.h).
  std::unique_ptr<libkineto::DeviceInfo> getDeviceInfo() override {
    return nullptr;
  }

  std::vector<libkineto::ResourceInfo> getResourceInfos() override {
    return {};
  }

  std::unique_ptr<libkineto::CpuTraceBuffer> getTraceBuffer() override {
    return nullptr;
  }

  ~KinetoSession() override {
    links_.stop();
    if (id_ != 0) {
      close_session(id_);
    }
  }

 private:
  // The lab's device work for the session's events, computed once it stopped
  // (Kineto asks for the device properties and metadata before the trace).
  const DeviceWork& work() {
    if (!work_) {
      work_ = device_work(result_);
    }
    return *work_;
  }

  uint64_t id_ = 0;
  SessionResult result_;
  ProfilerLinks links_;
  std::optional<DeviceWork> work_;
};

class Profiler final : public libkineto::IActivityProfiler {
 public:
  const std::string& name() const override {
    return name_;
  }
  const std::set<libkineto::ActivityType>& availableActivities() const override {
    return activities_;
  }
  std::unique_ptr<libkineto::IActivityProfilerSession> configure(
      const std::set<libkineto::ActivityType>& /*activity_types*/,
      const libkineto::Config& /*config*/) override {
    return std::make_unique<KinetoSession>();
  }
  std::unique_ptr<libkineto::IActivityProfilerSession> configure(
      int64_t /*ts_ms*/, int64_t /*duration_ms*/,
      const std::set<libkineto::ActivityType>& activity_types,
      const libkineto::Config& config) override {
    return configure(activity_types, config);
  }

 private:
  std::string name_ = "openreg";
  std::set<libkineto::ActivityType> activities_ = {libkineto::ActivityType::PRIVATEUSE1_RUNTIME,
                                                   libkineto::ActivityType::PRIVATEUSE1_DRIVER};
};

}  // namespace

REGISTER_PRIVATEUSE1_PROFILER(Profiler);

}  // namespace openreg::trace

// openreg as a device of torch.profiler (Kineto): a PrivateUse1 activity
// profiler. With torch.profiler.profile(activities=[..., PrivateUse1]) Kineto
// starts a session here with the profile; it opens a recorder session
// (Recorder.h) and, when the profile ends, hands every recorded event to
// Kineto as an activity on an "openreg" process: op events with their kernel
// and dispatch path, fallbacks, copies, casts and allocations, one track per
// recording thread.

// Kineto's plugin interface is only declared when USE_KINETO is set; torch's
// own build sets it. Only this file sees it.
#ifndef USE_KINETO
#define USE_KINETO
#endif

#include "trace/Clock.h"
#include "trace/Intern.h"
#include "trace/Recorder.h"

#include <c10/util/ApproximateClock.h>
#include <torch/csrc/profiler/standalone/privateuse1_profiler.h>

#include <IActivityProfiler.h>
#include <libkineto.h>
#include <output_base.h>

#include <memory>
#include <set>
#include <string>
#include <vector>

namespace openreg::trace {
namespace {

constexpr int64_t kProcess = 0x6f7267;  // the "openreg" process id in traces
constexpr uint64_t kCapacity = 1 << 22;
const char* const kKinds[] = {"op",   "backward", "fallback", "copy",    "cast",       "alloc",
                              "free", "mark",     "compiled", "compile", "collective", "step"};
const char* const kKernels[] = {"", "native", "fallback", "composite", "generic"};

// A name from `names` for `code`, "?" for a code it does not have.
template <size_t N>
const char* name_of(const char* const (&names)[N], int8_t code) {
  return code >= 0 && static_cast<size_t>(code) < N ? names[code] : "?";
}

class KinetoSession final : public libkineto::IActivityProfilerSession {
 public:
  void start() override {
    id_ = open_session(kCapacity, {});
    status_ = libkineto::TraceStatus::RECORDING;
  }

  void stop() override {
    if (id_ != 0) {
      result_ = close_session(id_);
      id_ = 0;
    }
    status_ = libkineto::TraceStatus::PROCESSING;
  }

  std::vector<std::string> errors() override {
    if (result_.dropped == 0) {
      return {};
    }
    return {"openreg dropped " + std::to_string(result_.dropped) + " events (capacity " +
            std::to_string(kCapacity) + ")"};
  }

  void processTrace(libkineto::ActivityLogger& logger) override {
    const std::vector<std::string> strings = interned_strings(0);
    // Kineto's times are c10::getTime(); the recorder's are steady_clock.
    const int64_t offset = c10::getTime() - now_ns();
    for (const ThreadEvents& t : result_.threads) {
      for (const Event& e : t.events) {
        libkineto::GenericTraceActivity a(span_, libkineto::ActivityType::PRIVATEUSE1_RUNTIME,
                                          strings[e.name]);
        a.startTime = e.start_ns + offset;
        a.endTime = a.startTime + std::max<int64_t>(e.dur_ns, 0);
        a.device = kProcess;
        a.resource = t.thread;
        a.threadId = static_cast<int32_t>(t.os_thread);
        a.addMetadataQuoted("kind", name_of(kKinds, e.kind));
        if (e.kernel > 0) {
          a.addMetadataQuoted("kernel", name_of(kKernels, e.kernel));
        }
        if (e.kind == static_cast<int8_t>(Kind::Op) && e.dispatch != 0) {
          a.addMetadataQuoted("dispatch", strings[e.dispatch]);
        }
        if (e.bytes != 0) {
          a.addMetadataQuoted("bytes", std::to_string(e.bytes));
        }
        logger.handleGenericActivity(a);
      }
    }
    status_ = libkineto::TraceStatus::READY;
  }

  std::unique_ptr<libkineto::DeviceInfo> getDeviceInfo() override {
    return std::make_unique<libkineto::DeviceInfo>(
        libkineto::DeviceInfo{kProcess, kProcess, "openreg", "openreg (openreg_lab recorder)"});
  }

  std::vector<libkineto::ResourceInfo> getResourceInfos() override {
    std::vector<libkineto::ResourceInfo> out;
    for (const ThreadEvents& t : result_.threads) {
      out.push_back({t.thread, t.thread, kProcess, "thread " + std::to_string(t.os_thread)});
    }
    return out;
  }

  std::unique_ptr<libkineto::CpuTraceBuffer> getTraceBuffer() override {
    return nullptr;
  }

  ~KinetoSession() override {
    if (id_ != 0) {
      close_session(id_);
    }
  }

 private:
  uint64_t id_ = 0;
  SessionResult result_;
  libkineto::TraceSpan span_{0, 0, "openreg"};
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

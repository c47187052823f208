#pragma once

// openreg's device work as Kineto activities: kernels, memcpys and their
// launches, linked to torch.profiler's ops (Note [openreg's work in
// torch.profiler's trace] in KinetoProfiler.cpp).

// Kineto's GenericTraceActivity::addMetadata formats with fmt, which libtorch
// has inside but does not export (its fmt::vformat is undefined here): the
// files that include Kineto's headers compile fmt header-only, this header
// first of them.
#if defined(FMT_VERSION) && !defined(FMT_HEADER_ONLY)
#error "fmt was included before trace/KinetoWork.h: include this header first"
#endif
#ifndef FMT_HEADER_ONLY
#define FMT_HEADER_ONLY
#endif

#include "trace/ProfilerWork.h"
#include "trace/Recorder.h"

#include <IActivityProfiler.h>
#include <output_base.h>

#include <cstdint>
#include <unordered_map>

namespace openreg::trace {

// Logs `work` (of `session`'s events) to `logger`: each item a kernel or a
// memcpy on its device and stream, a launch on its op's thread, the flow
// between them; `links` (ProfilerLinks::resolve) and `linked` find the
// torch.profiler op of each. `offset` is Kineto's clock less the recorder's,
// `time` the trace's start on Kineto's clock (for the tracks' names).
void log_device_work(libkineto::ActivityLogger& logger, const DeviceWork& work,
                     const SessionResult& session,
                     const std::unordered_map<uint64_t, uint64_t>& links,
                     const libkineto::getLinkedActivityCallback& linked, int64_t offset,
                     int64_t time);

}  // namespace openreg::trace

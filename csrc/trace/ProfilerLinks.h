#pragma once

// Which op of torch.profiler's each recorder event is: the link from openreg's
// device work to the cpu_op that launched it in torch.profiler's trace.
//
// Note [Which torch.profiler op launched openreg's work]
// torch.profiler gives each op it records a correlation id (the cpu_op's
// "External id" in its trace) and, as the op starts, hands it to Kineto,
// which passes it to every child session on the op's own thread
// (IActivityProfilerSession::pushCorrelationId; torch's
// ThreadLocalSubqueue::begin_op, unless experimental_config's
// disable_external_correlation; a user scope's id goes to
// pushUserCorrelationId, not followed here). RecordFunction calls the global
// callbacks before the thread-local ones, at a call's start and at its end:
// the recorder's op observer (global) has opened the op's event when
// torch.profiler's (thread-local) pushes the op's id. Measured in torch 2.13:
// torch.profiler's cpu_op starts 0.5-2 us after the recorder's event (tens of
// us when the thread is preempted between the two callbacks) and ends 0.3 us
// after it. So a push names the innermost open Op or Backward
// event of its thread, when the recorder recorded that op at all.
// torch.profiler records ops the recorder does not (CPU ops, the autograd
// engine's evaluate_function, the CPU ops a fallback runs), whose pushes find
// an enclosing op's event open. Two rules keep those out: an event is named by
// the first push that finds it (its own op's, made as it opened) and by none
// after; and only if torch.profiler's name for that op is the event's (the
// event's has the overload: "aten::add.Tensor" for torch.profiler's
// "aten::add"). An event without a link launches work that has no External
// id in the trace.

#include "trace/Recorder.h"

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace openreg::trace {

// A recorder event's name as a key: its thread and buffer position.
inline uint64_t event_key(int32_t thread, int64_t position) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(thread)) << 32) |
         static_cast<uint32_t>(position);
}

class ProfilerLinks {
 public:
  void start();
  void stop();
  // On the op's thread, as torch.profiler's op `id` starts.
  void push(uint64_t id);
  // event_key -> torch.profiler's id, for the events of `session`;
  // `op_name` gives torch.profiler's name of an id ("" if it has none).
  std::unordered_map<uint64_t, uint64_t> resolve(
      const SessionResult& session, const std::vector<std::string>& strings,
      const std::function<std::string(uint64_t)>& op_name) const;

 private:
  struct Push {
    uint64_t id;
    int32_t thread;
    int32_t position;
  };
  std::atomic<bool> on_{false};
  mutable std::mutex mutex_;
  std::vector<Push> pushes_;  // in the order they came, per thread
};

}  // namespace openreg::trace

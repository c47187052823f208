#pragma once

// Note [Collective events]
// A c10d collective run through the lab's checked collectives (csrc/checked/,
// around openreg's backend or PyTorch's Gloo) is one Event of kind Collective,
// appended on the thread that issued it (so its parent is the op or autograd
// node that issued it) and closed when the collective completes, on whichever thread sees that
// first (Gloo's worker, or the caller in Work::wait). Its fields:
//   name      "allreduce", "allgather", "send", ... (CheckedBackend.cpp)
//   dispatch  the group's name ("0" is the default group), the same on every
//             rank, so that (dispatch, seq) names one collective on all ranks
//   seq       the collective's number in its group, counted from 0
//   bytes     the size of this rank's input (for recv and scatter: of what
//             it receives)
//   from_dtype  the tensors' dtype
//   device    the openreg device, or kCpu for a CPU collective
//   src       this process's rank in the group; dst: the peer of a send or
//             recv, the root of broadcast/reduce/gather/scatter, -1 otherwise
//   reserved  the group's size
//   dur_ns    issue to completion; -1 while it has not completed
// A caller blocking in Work::wait adds a second Collective event, named
// "wait allreduce" (and so on), with the same group, seq and peer and the
// kWait flag, spanning the wait.
// Ranks above 127 do not fit the int8 rank fields; the lab spawns a few.

#include "trace/Recorder.h"

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <string_view>

namespace openreg::trace {

struct CollectiveInfo {
  std::string_view name;
  std::string_view group;
  int64_t seq = 0;
  int64_t bytes = 0;
  at::ScalarType dtype = at::ScalarType::Undefined;
  c10::Device device = c10::Device(c10::DeviceType::CPU);
  int rank = 0;
  int size = 1;
  int peer = -1;
};

// An open collective event, closed from any thread by end_collective.
struct CollectiveHandle {
  ThreadBuffer* buffer = nullptr;  // never freed (Recorder.cpp)
  uint64_t generation = 0;
  int32_t index = -1;
};

// Appends the open event of a collective issued now; an empty handle when no
// recording is on.
CollectiveHandle begin_collective(const CollectiveInfo& info);

// Closes it at end_ns (no-op when empty or when its recording has ended).
void end_collective(const CollectiveHandle& handle, int64_t end_ns);

// A wait on that collective from start_ns to now, on the calling thread.
void record_collective_wait(const CollectiveInfo& info, int64_t start_ns);

}  // namespace openreg::trace

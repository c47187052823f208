// DDP's runtime statistics on openreg: the c10d reducer Timer for PrivateUse1.
//
// DDP's Reducer times every sampled iteration (forward, backward compute,
// backward communication) through a Timer it looks up by device type in
// c10d's TimerRegistry; with none for a device type it warns "Time stats are
// currently only collected for CPU and CUDA devices" on every rank and leaves
// the averages of _get_ddp_logging_data() empty.
//
// openreg's device is synchronous: a kernel, a copy or a collective has
// finished when its call returns (Note [Device memory is host memory]), so the
// host's clock at a DDP event is the device's time of that event, and the
// timer records host timestamps like the CPU's. A device whose work runs
// asynchronously would record device events instead (CUDA's timer records
// cudaEvents and measures the time between them).

#include <torch/csrc/distributed/c10d/reducer_timer.hpp>

#include <c10/core/Device.h>

#include <memory>
#include <optional>

namespace openreg::distributed {

class OpenregTimer final : public c10d::Timer {
 public:
  explicit OpenregTimer(c10::Device /*device*/) {}

  std::optional<int64_t> measureDifference(Event start, Event end) override {
    const int64_t start_time = getTimeRef(start);
    const int64_t end_time = getTimeRef(end);
    // An event not recorded in this iteration (the backward's end, say, when
    // DDP runs without syncing) gives no measurement rather than a bogus one.
    if (start_time == c10d::kUnsetTime || end_time == c10d::kUnsetTime || end_time < start_time) {
      return std::nullopt;
    }
    return end_time - start_time;
  }
};

}  // namespace openreg::distributed

namespace c10d {  // the registry's macro names its registerer unqualified
C10_REGISTER_TYPED_CLASS(TimerRegistry, c10::kPrivateUse1, openreg::distributed::OpenregTimer)
}  // namespace c10d

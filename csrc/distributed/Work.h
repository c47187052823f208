#pragma once

// The Work a collective of openreg's backend returns: the transport's (Gloo's)
// Work underneath, plus what only this backend knows: the openreg tensors the
// caller passed (the future's value, not their host views), the step that
// finishes the result (ReduceOp::AVG divides after Gloo's sum), the error
// message that names the collective, and the trace event
// (Note [Collective events]).
//
// Completion is observed once, by whichever comes first: the transport's
// future calling back on its worker thread, wait(), or isCompleted()
// (Note [Finishing a Work once]). A collective issued ahead of its ranks'
// agreement (Note [Ranks agree before Gloo runs]) fails with the ValueError
// if they turn out to disagree.

#include "distributed/Agreement.h"
#include "runtime/Seam.h"  // Note [The lab's seam]

#include <ATen/core/ivalue.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace openreg::distributed {

// What a collective is, for its errors: "openreg allreduce (group '0', rank 1
// of 2, 16 bytes of Float on openreg:1)". Built only when an error needs it.
std::string describe(const seam::CollectiveInfo& info);

// The lab's collective hooks (Note [The lab's seam]): an empty event, and
// nothing recorded, while no lab is loaded.
seam::CollectiveEvent lab_begin_collective(const seam::CollectiveInfo& info);
void lab_end_collective(const seam::CollectiveEvent& event);

class Work : public c10d::Work {
 public:
  // Runs on the result after the transport succeeds (e.g. the AVG division).
  using Finish = std::function<void()>;

  // `ahead` is the call when it was issued ahead of its ranks' agreement.
  Work(c10::intrusive_ptr<c10d::Work> transport, std::shared_ptr<AheadCall> ahead,
       std::weak_ptr<Agreement> agreement, c10d::OpType type, int rank,
       std::vector<at::Tensor> outputs, std::vector<at::Tensor> inputs, Finish finish,
       seam::CollectiveInfo info, seam::CollectiveEvent event);

  bool isCompleted() override;
  bool isSuccess() const override;
  std::exception_ptr exception() const override;
  int sourceRank() const override;
  std::vector<at::Tensor> result() override;
  void synchronize() override {}  // Note [Synchronous execution]: nothing to order
  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
  void abort() override;
  // When the last reference goes: lets go of the call ahead, whose `fail`
  // holds a weak reference to this Work (a weak reference keeps an
  // intrusive_ptr's object, and so Gloo's context, alive).
  void release_resources() override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;

  // Subscribes to the transport's future when it has one (Gloo's send and
  // recv do not; they finish on wait() or isCompleted()), and hands a call
  // ahead to the agreement's watchdog.
  void watch_transport();

 private:
  void finish_once(std::exception_ptr error);
  // `error` as this Work's DistBackendError; `patience`: how long it looks
  // for a rank that left (Note [A rank that left]).
  std::exception_ptr named(std::exception_ptr error,
                           std::chrono::milliseconds patience = kLeftPatience) const;
  // A failed collective looks this long for the row of a rank that left: its
  // Gloo connection may close before the store has applied that row.
  static constexpr auto kLeftPatience = std::chrono::milliseconds(500);

  c10::intrusive_ptr<c10d::Work> transport_;
  std::shared_ptr<AheadCall> ahead_;
  std::weak_ptr<Agreement> agreement_;
  std::vector<at::Tensor> outputs_;
  std::vector<at::Tensor> inputs_;  // kept alive: the transport reads their host views
  Finish finish_;
  seam::CollectiveInfo info_;
  std::string group_;  // info_.group views this
  std::string name_;   // info_.name views this
  seam::CollectiveEvent event_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  std::once_flag finished_;
};

}  // namespace openreg::distributed

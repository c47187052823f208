#pragma once

// The Work a checked collective returns (Note [Checked collectives]): the
// inner backend's Work underneath, plus what only the layer knows: the call
// as it ran ahead of its ranks' agreement (Note [Ranks agree before Gloo
// runs]), which fails with the ValueError if they turn out to disagree; a
// send's check (Note [A send meets its recv]); the trace event
// (Note [Collective events]); and a rank that left, named in the error
// (Note [A rank that left]).
//
// Completion is observed once, by whichever comes first: the inner Work's
// future calling back, wait(), or isCompleted() (as Note [Finishing a Work
// once] in csrc/distributed/Work.cpp).

#include "checked/Agreement.h"
#include "distributed/Work.h"
#include "trace/Collective.h"

#include <ATen/core/ivalue.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

namespace openreg::checked {

class CheckedWork : public c10d::Work {
 public:
  // `ahead` is the call when it was issued ahead of its ranks' agreement;
  // `seq` and `peer` as recorded (Note [Collective events]).
  CheckedWork(c10::intrusive_ptr<c10d::Work> inner, std::shared_ptr<AheadCall> ahead,
              std::weak_ptr<Agreement> agreement, c10d::OpType type, int rank,
              std::vector<at::Tensor> outputs, std::function<void()> finish,
              distributed::CallInfo info, int64_t seq, int peer, trace::CollectiveHandle event);

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

  // Subscribes to the inner Work's future when it has one, and hands a call
  // ahead to the agreement's watchdog.
  void watch_inner();

 private:
  void finish_once(std::exception_ptr error);
  // `error` as this Work's DistBackendError; `patience`: how long it looks
  // for a rank that left (Note [A rank that left]).
  std::exception_ptr named(std::exception_ptr error,
                           std::chrono::milliseconds patience = kLeftPatience) const;
  trace::CollectiveInfo traced() const;
  // A failed collective looks this long for the row of a rank that left: its
  // Gloo connection may close before the store has applied that row.
  static constexpr auto kLeftPatience = std::chrono::milliseconds(500);

  c10::intrusive_ptr<c10d::Work> inner_;
  std::shared_ptr<AheadCall> ahead_;
  std::weak_ptr<Agreement> agreement_;
  std::vector<at::Tensor> outputs_;
  std::function<void()> finish_;
  distributed::CallInfo info_;
  int64_t seq_;
  int peer_;
  trace::CollectiveHandle event_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  std::once_flag finished_;
};

// The recorded form of a call (views into `info`).
trace::CollectiveInfo traced(const distributed::CallInfo& info, int64_t seq, int peer);

// `e`'s message without its C++ backtrace.
std::string message_of(const std::exception& e);

// `error` named as a failure of the call `info` describes (one line:
// "<describe> failed: <left> (<why>)"), where `left` names a rank that left
// ("" when none did). A ValueError, or an error the inner backend named
// already, stays as it is but for `left` (Note [Checked collectives]).
std::exception_ptr failure(const distributed::CallInfo& info, std::exception_ptr error,
                           const std::string& left);

}  // namespace openreg::checked

#pragma once

// The Work a collective of openreg's backend returns: the transport's (Gloo's)
// Work underneath, plus what only this backend knows: the openreg tensors the
// caller passed (the future's value, not their host views), the step that
// finishes the result (ReduceOp::AVG divides after Gloo's sum), and the error
// message that names the collective (CallInfo).
//
// Completion is observed once, by whichever comes first: the transport's
// future calling back on its worker thread, wait(), or isCompleted()
// (Note [Finishing a Work once]).

#include <ATen/core/ivalue.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <chrono>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

namespace openreg::distributed {

// What a collective is, for its errors.
struct CallInfo {
  const char* name = "";  // "allreduce", "send", ... (Backend.cpp)
  std::string group;      // the group's name ("0": the default group)
  int64_t bytes = 0;      // this rank's input (for recv and scatter: what it receives)
  at::ScalarType dtype = at::ScalarType::Undefined;
  c10::Device device = c10::Device(c10::DeviceType::CPU);
  int rank = 0;
  int size = 1;
};

// "openreg allreduce (group '0', rank 1 of 2, 16 bytes of Float on openreg:1)".
std::string describe(const CallInfo& info);

// Runs `issue` (the transport's call); an error it raises, other than a
// ValueError, becomes one line naming the call: "<describe> failed: <why>".
c10::intrusive_ptr<c10d::Work> issue_named(
    const CallInfo& info, const std::function<c10::intrusive_ptr<c10d::Work>()>& issue);

class Work : public c10d::Work {
 public:
  // Runs on the result after the transport succeeds (e.g. the AVG division).
  using Finish = std::function<void()>;

  Work(c10::intrusive_ptr<c10d::Work> transport, c10d::OpType type, int rank,
       std::vector<at::Tensor> outputs, std::vector<at::Tensor> inputs, Finish finish,
       CallInfo info);

  bool isCompleted() override;
  bool isSuccess() const override;
  std::exception_ptr exception() const override;
  int sourceRank() const override;
  std::vector<at::Tensor> result() override;
  void synchronize() override {}  // Note [Synchronous execution]: nothing to order
  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
  void abort() override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;

  // Subscribes to the transport's future when it has one (Gloo's send and
  // recv do not; they finish on wait() or isCompleted()).
  void watch_transport();

 private:
  void finish_once(std::exception_ptr error);
  std::exception_ptr named(std::exception_ptr error) const;

  c10::intrusive_ptr<c10d::Work> transport_;
  std::vector<at::Tensor> outputs_;
  std::vector<at::Tensor> inputs_;  // kept alive: the transport reads their host views
  Finish finish_;
  CallInfo info_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  std::once_flag finished_;
};

}  // namespace openreg::distributed

#include "distributed/Work.h"

#include <ATen/core/jit_type.h>
#include <c10/util/Exception.h>

#include <sstream>

namespace openreg::distributed {

namespace {

// The message of `e` without the C++ backtrace (TORCH_SHOW_CPP_STACKTRACES
// shows the backtrace of the error that carries it).
std::string message_of(const std::exception& e) {
  if (const auto* error = dynamic_cast<const c10::Error*>(&e)) {
    return error->what_without_backtrace();
  }
  return e.what();
}

}  // namespace

std::string describe(const CallInfo& info) {
  std::ostringstream what;
  what << "openreg " << info.name << " (group '" << info.group << "', rank " << info.rank << " of "
       << info.size << ", " << info.bytes << " bytes";
  if (info.dtype != at::ScalarType::Undefined) {
    what << " of " << info.dtype;
  }
  what << " on " << info.device << ")";
  return what.str();
}

c10::intrusive_ptr<c10d::Work> issue_named(
    const CallInfo& info, const std::function<c10::intrusive_ptr<c10d::Work>()>& issue) {
  try {
    return issue();
  } catch (const c10::ValueError&) {
    throw;  // a refusal names the call already
  } catch (const std::exception& e) {
    TORCH_CHECK_WITH(DistBackendError, false, describe(info), " failed: ", message_of(e));
  }
}

Work::Work(c10::intrusive_ptr<c10d::Work> transport, c10d::OpType type, int rank,
           std::vector<at::Tensor> outputs, std::vector<at::Tensor> inputs, Finish finish,
           CallInfo info)
    : c10d::Work(rank, type),
      transport_(std::move(transport)),
      outputs_(std::move(outputs)),
      inputs_(std::move(inputs)),
      finish_(std::move(finish)),
      info_(std::move(info)),
      future_(
          c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))) {
}

// Note [Finishing a Work once]
// The transport completes on its own thread. The first observer of that
// completion (the transport's future callback, wait() or isCompleted())
// runs finish_once: it applies the finishing step to the outputs and
// completes this Work's future with the caller's openreg tensors (or with
// the error, named). Later observers find it done. Gloo's send and recv have
// no future, so they finish when the caller waits or polls.
void Work::finish_once(std::exception_ptr error) {
  std::call_once(finished_, [&] {
    if (!error && finish_) {
      try {
        finish_();
      } catch (...) {
        error = std::current_exception();
      }
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      completed_ = true;
      exception_ = error ? named(error) : nullptr;
    }
    cv_.notify_all();
    if (exception_) {
      future_->setError(exception_);
    } else {
      future_->markCompleted(c10::IValue(outputs_));
    }
  });
}

std::exception_ptr Work::named(std::exception_ptr error) const {
  try {
    std::rethrow_exception(error);
  } catch (const c10::ValueError&) {
    return error;  // names the collective already
  } catch (const std::exception& e) {
    // One line: the transport's C++ backtrace stays out of the message.
    try {
      TORCH_CHECK_WITH(DistBackendError, false, describe(info_), " failed: ", message_of(e));
    } catch (...) {
      return std::current_exception();
    }
  }
  return error;
}

void Work::watch_transport() {
  c10::intrusive_ptr<c10::ivalue::Future> done;
  try {
    done = transport_->getFuture();
  } catch (const c10::Error&) {
    done = nullptr;  // no future (Gloo's send/recv): finished by wait() or isCompleted()
  }
  if (done) {
    auto self = c10::intrusive_ptr<Work>::reclaim_copy(this);
    done->addCallback([self](c10::ivalue::Future& f) {
      self->finish_once(f.hasError() ? f.exception_ptr() : nullptr);
    });
  }
}

bool Work::isCompleted() {
  if (!future_->completed() && transport_->isCompleted()) {
    finish_once(transport_->isSuccess() ? nullptr : transport_->exception());
  }
  return future_->completed();
}

bool Work::isSuccess() const {
  return future_->completed() && !future_->hasError();
}

std::exception_ptr Work::exception() const {
  return future_->completed() && future_->hasError() ? future_->exception_ptr() : nullptr;
}

int Work::sourceRank() const {
  return transport_->sourceRank();
}

std::vector<at::Tensor> Work::result() {
  return outputs_;
}

bool Work::wait(std::chrono::milliseconds timeout) {
  try {
    transport_->wait(timeout);
  } catch (...) {
    if (!transport_->isCompleted()) {
      // The wait timed out, not the collective: a later wait() may see it complete.
      std::rethrow_exception(named(std::current_exception()));
    }
    finish_once(std::current_exception());
  }
  finish_once(nullptr);  // a no-op if the transport's callback finished it
  future_->wait();       // that callback may still be running on Gloo's thread
  if (future_->hasError()) {
    std::rethrow_exception(future_->exception_ptr());
  }
  return true;
}

void Work::abort() {
  transport_->abort();
}

c10::intrusive_ptr<c10::ivalue::Future> Work::getFuture() {
  return future_;
}

}  // namespace openreg::distributed

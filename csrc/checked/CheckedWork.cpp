#include "checked/CheckedWork.h"

#include "trace/Clock.h"

#include <ATen/core/jit_type.h>
#include <c10/util/Exception.h>

namespace openreg::checked {

trace::CollectiveInfo traced(const distributed::CallInfo& info, int64_t seq, int peer) {
  trace::CollectiveInfo t;
  t.name = info.name;
  t.group = info.group;
  t.seq = seq;
  t.bytes = info.bytes;
  t.dtype = info.dtype;
  t.device = info.device;
  t.rank = info.rank;
  t.size = info.size;
  t.peer = peer;
  return t;
}

std::string message_of(const std::exception& e) {
  if (const auto* error = dynamic_cast<const c10::Error*>(&e)) {
    return error->what_without_backtrace();
  }
  return e.what();
}

std::exception_ptr failure(const distributed::CallInfo& info, std::exception_ptr error,
                           const std::string& left) {
  try {
    std::rethrow_exception(error);
  } catch (const c10::ValueError&) {
    return error;  // the ranks disagree, or a refusal: the message names the collective already
  } catch (const std::exception& e) {
    const std::string prefix = distributed::describe(info) + " failed: ";
    std::string why = message_of(e);
    const bool named = why.rfind(prefix, 0) == 0;  // by openreg's backend (distributed/Work.h)
    if (named && left.empty()) {
      return error;
    }
    if (named) {
      why = why.substr(prefix.size());
    }
    try {
      TORCH_CHECK_WITH(DistBackendError, false, prefix,
                       left.empty() ? why : left + " (" + why + ")");
    } catch (...) {
      return std::current_exception();
    }
  }
  return error;
}

CheckedWork::CheckedWork(c10::intrusive_ptr<c10d::Work> inner, std::shared_ptr<AheadCall> ahead,
                         std::weak_ptr<Agreement> agreement, c10d::OpType type, int rank,
                         std::vector<at::Tensor> outputs, std::function<void()> finish,
                         distributed::CallInfo info, int64_t seq, int peer,
                         trace::CollectiveHandle event)
    : c10d::Work(rank, type),
      inner_(std::move(inner)),
      ahead_(std::move(ahead)),
      agreement_(std::move(agreement)),
      outputs_(std::move(outputs)),
      finish_(std::move(finish)),
      info_(std::move(info)),
      seq_(seq),
      peer_(peer),
      event_(event),
      future_(
          c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))) {
}

trace::CollectiveInfo CheckedWork::traced() const {
  return checked::traced(info_, seq_, peer_);
}

void CheckedWork::finish_once(std::exception_ptr error) {
  std::call_once(finished_, [&] {
    if (ahead_ != nullptr) {
      // Issued ahead of the agreement: if the ranks disagreed, that is the
      // error to report (Note [Ranks agree before Gloo runs]). Asked whoever
      // finishes first: the watchdog may have found the disagreement (and set
      // `over`) just as the inner Work completed, after the others' decoy,
      // and its error must not be lost to the inner Work's success.
      ahead_->over = true;
      if (std::shared_ptr<Agreement> agreement = agreement_.lock()) {
        if (std::exception_ptr disagreement = agreement->disagreement(*ahead_)) {
          error = disagreement;
        }
      }
    }
    if (!error && finish_) {
      try {
        finish_();
      } catch (...) {
        error = std::current_exception();
      }
    }
    trace::end_collective(event_, trace::now_ns());
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

std::exception_ptr CheckedWork::named(std::exception_ptr error,
                                      std::chrono::milliseconds patience) const {
  std::string left;  // Note [A rank that left]: name the rank, not only its address
  try {
    std::rethrow_exception(error);
  } catch (const c10::ValueError&) {
    return error;
  } catch (const std::exception& e) {
    std::shared_ptr<Agreement> agreement = agreement_.lock();
    const c10d::OpType type = retrieveOpType();
    if (agreement != nullptr && seq_ >= 0 && type != c10d::OpType::SEND &&
        type != c10d::OpType::RECV && type != c10d::OpType::RECVANYSOURCE &&
        message_of(e).find(kLeftTheGroup) == std::string::npos) {
      left = agreement->who_left(seq_, patience);
    }
  }
  return failure(info_, error, left);
}

void CheckedWork::watch_inner() {
  c10::intrusive_ptr<c10::ivalue::Future> done;
  try {
    done = inner_->getFuture();
  } catch (const c10::Error&) {
    done = nullptr;  // no future (Gloo's send/recv): finished by wait() or isCompleted()
  }
  if (done) {
    auto self = c10::intrusive_ptr<CheckedWork>::reclaim_copy(this);
    done->addCallback([self](c10::ivalue::Future& f) {
      self->finish_once(f.hasError() ? f.exception_ptr() : nullptr);
    });
  }
  std::shared_ptr<Agreement> agreement = agreement_.lock();
  if (ahead_ != nullptr && agreement != nullptr) {
    c10::weak_intrusive_ptr<CheckedWork> weak(c10::intrusive_ptr<CheckedWork>::reclaim_copy(this));
    ahead_->fail = [weak](std::exception_ptr error) {
      if (c10::intrusive_ptr<CheckedWork> self = weak.lock()) {
        self->finish_once(error);
      }
    };
    agreement->watch(ahead_);
  }
}

bool CheckedWork::isCompleted() {
  if (!future_->completed() && inner_->isCompleted()) {
    finish_once(inner_->isSuccess() ? nullptr : inner_->exception());
  }
  return future_->completed();
}

bool CheckedWork::isSuccess() const {
  return future_->completed() && !future_->hasError();
}

std::exception_ptr CheckedWork::exception() const {
  return future_->completed() && future_->hasError() ? future_->exception_ptr() : nullptr;
}

int CheckedWork::sourceRank() const {
  return inner_->sourceRank();
}

std::vector<at::Tensor> CheckedWork::result() {
  return outputs_;
}

bool CheckedWork::wait(std::chrono::milliseconds timeout) {
  const int64_t start = trace::now_ns();
  try {
    inner_->wait(timeout);
  } catch (...) {
    if (!inner_->isCompleted()) {
      // The wait timed out, not the collective: it may still complete, and
      // a later wait() can see it do so (one look for a rank that left).
      trace::record_collective_wait(traced(), start);
      std::rethrow_exception(named(std::current_exception(), std::chrono::milliseconds(0)));
    }
    finish_once(std::current_exception());
  }
  finish_once(nullptr);  // a no-op if the inner Work's callback finished it
  future_->wait();       // that callback may still be running on Gloo's thread
  trace::record_collective_wait(traced(), start);
  if (future_->hasError()) {
    std::rethrow_exception(future_->exception_ptr());
  }
  return true;
}

void CheckedWork::release_resources() {
  ahead_.reset();
}

void CheckedWork::abort() {
  inner_->abort();
}

c10::intrusive_ptr<c10::ivalue::Future> CheckedWork::getFuture() {
  return future_;
}

}  // namespace openreg::checked

#include "distributed/Work.h"

#include "runtime/Clock.h"
#include "runtime/Seam.h"  // Note [The lab's seam]

#include <ATen/core/jit_type.h>
#include <c10/util/Exception.h>

#include <sstream>

namespace openreg::distributed {

seam::CollectiveEvent lab_begin_collective(const seam::CollectiveInfo& info) {
  const seam::Hooks* lab = seam::hooks();
  return lab != nullptr ? lab->begin_collective(info) : seam::CollectiveEvent{};
}

void lab_end_collective(const seam::CollectiveEvent& event) {
  if (const seam::Hooks* lab = seam::hooks()) {
    lab->end_collective(event, now_ns());
  }
}

namespace {

void lab_collective_wait(const seam::CollectiveInfo& info, int64_t start_ns) {
  if (const seam::Hooks* lab = seam::hooks()) {
    lab->record_collective_wait(info, start_ns);
  }
}

}  // namespace

std::string describe(const seam::CollectiveInfo& info) {
  std::ostringstream what;
  what << "openreg " << info.name << " (group '" << info.group << "', rank " << info.rank << " of "
       << info.size << ", " << info.bytes << " bytes";
  if (info.dtype != at::ScalarType::Undefined) {
    what << " of " << info.dtype;
  }
  what << " on " << info.device << ")";
  return what.str();
}

Work::Work(c10::intrusive_ptr<c10d::Work> transport, std::shared_ptr<AheadCall> ahead,
           std::weak_ptr<Agreement> agreement, c10d::OpType type, int rank,
           std::vector<at::Tensor> outputs, std::vector<at::Tensor> inputs, Finish finish,
           seam::CollectiveInfo info, seam::CollectiveEvent event)
    : c10d::Work(rank, type),
      transport_(std::move(transport)),
      ahead_(std::move(ahead)),
      agreement_(std::move(agreement)),
      outputs_(std::move(outputs)),
      inputs_(std::move(inputs)),
      finish_(std::move(finish)),
      info_(info),
      group_(info.group),
      name_(info.name),
      event_(event),
      future_(
          c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))) {
  info_.group = group_;
  info_.name = name_;
}

// Note [Finishing a Work once]
// The transport completes on its own thread. The first observer of that
// completion (the transport's future callback, wait() or isCompleted())
// runs finish_once: it applies the finishing step to the outputs, closes the
// trace event at the time it ran, and completes this Work's future with the
// caller's openreg tensors (or with the error, named). Later observers find
// it done. Gloo's send and recv have no future, so they finish when the
// caller waits or polls, and their event ends then.
void Work::finish_once(std::exception_ptr error) {
  std::call_once(finished_, [&] {
    if (ahead_ != nullptr) {
      // Issued ahead of the agreement: if the ranks disagreed, that is the
      // error to report (Note [Ranks agree before Gloo runs]). Asked whoever
      // finishes first: the watchdog may have found the disagreement (and set
      // `over`) just as the transport completed, after the others' decoy,
      // and its error must not be lost to the transport's success.
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
    lab_end_collective(event_);
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

std::exception_ptr Work::named(std::exception_ptr error, std::chrono::milliseconds patience) const {
  try {
    std::rethrow_exception(error);
  } catch (const c10::ValueError&) {
    return error;  // the ranks disagree: the message names the collective already
  } catch (const std::exception& e) {
    // One line: the transport's C++ backtrace stays out of the message
    // (TORCH_SHOW_CPP_STACKTRACES shows this error's own).
    const auto* error = dynamic_cast<const c10::Error*>(&e);
    const std::string why = error ? error->what_without_backtrace() : e.what();
    std::string left;  // Note [A rank that left]: name the rank, not only its address
    std::shared_ptr<Agreement> agreement = agreement_.lock();
    const c10d::OpType type = retrieveOpType();
    if (agreement != nullptr && info_.seq >= 0 && type != c10d::OpType::SEND &&
        type != c10d::OpType::RECV && type != c10d::OpType::RECVANYSOURCE &&
        why.find(kLeftTheGroup) == std::string::npos) {
      left = agreement->who_left(info_.seq, patience);
    }
    try {
      TORCH_CHECK_WITH(DistBackendError, false, describe(info_),
                       " failed: ", left.empty() ? why : left + " (" + why + ")");
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
  std::shared_ptr<Agreement> agreement = agreement_.lock();
  if (ahead_ != nullptr && agreement != nullptr) {
    c10::weak_intrusive_ptr<Work> weak(c10::intrusive_ptr<Work>::reclaim_copy(this));
    ahead_->fail = [weak](std::exception_ptr error) {
      if (c10::intrusive_ptr<Work> self = weak.lock()) {
        self->finish_once(error);
      }
    };
    agreement->watch(ahead_);
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
  const int64_t start = now_ns();
  try {
    transport_->wait(timeout);
  } catch (...) {
    if (!transport_->isCompleted()) {
      // The wait timed out, not the collective: it may still complete, and
      // a later wait() can see it do so (one look for a rank that left).
      lab_collective_wait(info_, start);
      std::rethrow_exception(named(std::current_exception(), std::chrono::milliseconds(0)));
    }
    finish_once(std::current_exception());
  }
  finish_once(nullptr);  // a no-op if the transport's callback finished it
  future_->wait();       // that callback may still be running on Gloo's thread
  lab_collective_wait(info_, start);
  if (future_->hasError()) {
    std::rethrow_exception(future_->exception_ptr());
  }
  return true;
}

void Work::release_resources() {
  ahead_.reset();
}

void Work::abort() {
  transport_->abort();
}

c10::intrusive_ptr<c10::ivalue::Future> Work::getFuture() {
  return future_;
}

}  // namespace openreg::distributed

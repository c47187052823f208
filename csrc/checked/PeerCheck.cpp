#include "checked/PeerCheck.h"

#include "checked/Agreement.h"  // leaving_reason

#include <ATen/ops/zeros.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <sstream>
#include <thread>

namespace openreg::checked {

namespace {

using Clock = std::chrono::steady_clock;

std::vector<uint8_t> row_of(const at::Tensor& t) {
  const int64_t row[2] = {static_cast<int64_t>(t.scalar_type()), t.numel()};
  const auto* bytes = reinterpret_cast<const uint8_t*>(row);
  return std::vector<uint8_t>(bytes, bytes + sizeof(row));
}

std::vector<int64_t> row_from(const std::vector<uint8_t>& bytes, const std::string& key) {
  std::vector<int64_t> row(bytes.size() / sizeof(int64_t));
  std::memcpy(row.data(), bytes.data(), row.size() * sizeof(int64_t));
  TORCH_CHECK(row.size() == 2, "openreg: a malformed send/recv row in the store at ", key);
  return row;
}

// The refusal at `key` if the receiver posted one (deleted once read), else
// empty.
std::vector<int64_t> refusal(c10d::Store& store, const std::string& key) {
  if (!store.check({key})) {
    return {};
  }
  const std::vector<uint8_t> bytes = store.get(key);
  store.deleteKey(key);
  return row_from(bytes, key);
}

// The next row of the queue at `key` (a sender's rows, in the order of its
// sends), popped once posted; empty if none came within the store's timeout.
// Polled: a blocking pop would hold the connection that other sends and
// recvs post through.
std::vector<int64_t> next_row(c10d::Store& store, const std::string& key) {
  const auto deadline = Clock::now() + store.getTimeout();
  auto pause = std::chrono::microseconds(20);
  for (;;) {
    try {
      return row_from(store.queuePop(key, /*block=*/false), key);
    } catch (const c10::DistQueueEmptyError&) {
      if (Clock::now() >= deadline) {
        return {};
      }
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(1000));
  }
}

std::string tensor_text(const std::vector<int64_t>& row) {
  return std::string("one ") + c10::toString(static_cast<at::ScalarType>(row[0])) + " tensor of " +
         std::to_string(row[1]) + " elements";
}

// A recv that a thread of its own issues once the sender's row is read
// (Note [A send meets its recv]).
class DeferredRecv : public c10d::Work {
 public:
  explicit DeferredRecv(int src) : c10d::Work(-1, c10d::OpType::RECV), src_(src) {}

  // Runs `body` (which waits for the recv) on its own thread, then finishes.
  void start(std::function<void()> body) {
    auto state = state_;
    std::thread([state, body = std::move(body)] {
      std::exception_ptr error;
      try {
        body();
      } catch (...) {
        error = std::current_exception();
      }
      {
        std::lock_guard<std::mutex> lock(state->mutex);
        state->done = true;
        state->error = error;
      }
      state->cv.notify_all();
    }).detach();
  }

  bool isCompleted() override {
    std::lock_guard<std::mutex> lock(state_->mutex);
    return state_->done;
  }
  bool isSuccess() const override {
    std::lock_guard<std::mutex> lock(state_->mutex);
    return state_->done && !state_->error;
  }
  std::exception_ptr exception() const override {
    std::lock_guard<std::mutex> lock(state_->mutex);
    return state_->error;
  }
  int sourceRank() const override {
    return src_;
  }
  bool wait(std::chrono::milliseconds timeout) override {
    std::unique_lock<std::mutex> lock(state_->mutex);
    if (timeout == kNoTimeout) {
      state_->cv.wait(lock, [&] { return state_->done; });
    } else {
      TORCH_CHECK(state_->cv.wait_for(lock, timeout, [&] { return state_->done; }),
                  "timed out after ", timeout.count(), " ms waiting for the recv");
    }
    if (state_->error) {
      std::rethrow_exception(state_->error);
    }
    return true;
  }

 private:
  struct State {
    std::mutex mutex;
    std::condition_variable cv;
    bool done = false;
    std::exception_ptr error;
  };
  int src_;
  std::shared_ptr<State> state_ = std::make_shared<State>();
};

}  // namespace

PeerCheck::PeerCheck(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                     std::string group_name)
    : store_(store->clone()), rank_(rank), size_(size), group_name_(std::move(group_name)) {}

std::string PeerCheck::key(int src, int dst, int64_t n, const char* side) const {
  return "openreg/p2p/" + std::to_string(src) + "/" + std::to_string(dst) + "/" +
         std::to_string(n) + "/" + side;
}

std::string PeerCheck::mismatch(int src, const std::vector<int64_t>& sent, int dst,
                                const std::vector<int64_t>& received, const char* op) const {
  if (sent == received) {
    return "";
  }
  std::ostringstream what;
  what << "openreg " << op << " (group '" << group_name_ << "', rank " << rank_ << " of " << size_
       << "): rank " << src << " sends " << tensor_text(sent) << " and rank " << dst
       << " receives into " << tensor_text(received)
       << ". A send and its recv take the same dtype and number of elements; pass the same on "
          "both ranks (e.g. x.to(torch.float32)); the receiver's tensor was not written";
  return what.str();
}

void PeerCheck::leave(int64_t how) noexcept {
  const int64_t row[2] = {-1, how};
  const auto* bytes = reinterpret_cast<const uint8_t*>(row);
  for (int dst = 0; dst < size_; ++dst) {
    if (dst == rank_) {
      continue;
    }
    try {
      store_->queuePush("openreg/p2p/" + std::to_string(rank_) + "/" + std::to_string(dst),
                        std::vector<uint8_t>(bytes, bytes + sizeof(row)));
    } catch (const std::exception&) {
      return;  // the store is gone (its host left first)
    }
  }
}

std::function<void()> PeerCheck::send(int dst, const at::Tensor& tensor) {
  int64_t n = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    n = sends_[dst]++;
  }
  const std::vector<uint8_t> mine = row_of(tensor);
  store_->queuePush("openreg/p2p/" + std::to_string(rank_) + "/" + std::to_string(dst), mine);
  return [self = shared_from_this(), dst, n,
          sent = std::vector<int64_t>{static_cast<int64_t>(tensor.scalar_type()), tensor.numel()}] {
    // The send completed, so its recv (or the scratch one) was posted, after
    // the receiver's row if it refused the send.
    const std::vector<int64_t> received =
        refusal(*self->store_, self->key(self->rank_, dst, n, "refused"));
    if (received.empty()) {
      return;
    }
    const std::string what = self->mismatch(self->rank_, sent, dst, received, "send");
    TORCH_CHECK_VALUE(what.empty(), what);
  };
}

c10::intrusive_ptr<c10d::Work> PeerCheck::recv(int src, const at::Tensor& tensor,
                                               std::vector<at::Tensor> views, Receive receive) {
  int64_t n = 0;
  std::shared_future<void> before;
  auto issued = std::make_shared<std::promise<void>>();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    n = recvs_[src]++;
    auto it = issued_.find(src);
    if (it != issued_.end()) {
      before = it->second;
    }
    issued_[src] = issued->get_future().share();
  }
  auto work = c10::make_intrusive<DeferredRecv>(src);
  const std::vector<int64_t> received{static_cast<int64_t>(tensor.scalar_type()), tensor.numel()};
  work->start([self = shared_from_this(), src, n, received, views = std::move(views),
               receive = std::move(receive), before, issued, mine = row_of(tensor)]() mutable {
    bool released = false;
    auto release = [&] {  // the next recv from `src` may go
      if (!released) {
        released = true;
        issued->set_value();
      }
    };
    struct Finally {
      std::function<void()> run;
      ~Finally() {
        run();
      }
    } finally{release};
    if (before.valid()) {
      before.wait();  // the recvs from `src` take the sender's rows in order
    }
    const std::vector<int64_t> sent = next_row(
        *self->store_, "openreg/p2p/" + std::to_string(src) + "/" + std::to_string(self->rank_));
    TORCH_CHECK(!sent.empty(), "openreg recv (group '", self->group_name_, "', rank ", self->rank_,
                " of ", self->size_, "): rank ", src, " posted no send within the group's timeout");
    // A rank that left pushes {-1, why} after its last send (Note [A rank that left]).
    TORCH_CHECK_WITH(DistBackendError, sent[0] >= 0, "rank ", src, " left the group (",
                     leaving_reason(sent[1]),
                     ") before sending what this recv expects: every recv needs its send before "
                     "a rank leaves");
    const std::string what = self->mismatch(src, sent, self->rank_, received, "recv");
    if (what.empty()) {
      c10::intrusive_ptr<c10d::Work> work = receive(views);
      release();
      work->wait();
      return;
    }
    const std::string refused = self->key(src, self->rank_, n, "refused");
    self->store_->set(refused, mine);
    // A TCPStore set has no reply: the server may not have applied it yet
    // when the sender, told by Gloo that its send completed, looks for it on
    // another connection. The server answers this connection's requests in
    // order, so once the check returns the row is there.
    TORCH_CHECK(self->store_->check({refused}), "openreg recv: the store lost the refusal at ",
                refused);
    std::vector<at::Tensor> scratch{
        at::zeros({sent[1]}, at::TensorOptions().dtype(static_cast<at::ScalarType>(sent[0])))};
    c10::intrusive_ptr<c10d::Work> work = receive(scratch);
    release();
    work->wait();
    TORCH_CHECK_VALUE(false, what);
  });
  return work;
}

}  // namespace openreg::checked

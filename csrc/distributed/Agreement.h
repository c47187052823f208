#pragma once

// Note [Ranks agree before Gloo runs]
// Gloo trusts every rank to pass tensors of the same size: when two ranks
// disagree (one all-reduces 4 floats, the other 8), the rank expecting fewer
// bytes is terminated by Gloo's transport thread, where nothing can catch the
// error; float32 against int32 of the same size sums bit patterns silently.
// So each collective whose ranks must agree comes with an exchange: every rank
// all-gathers its call's signature (the collective, dtype, number of tensors
// and elements, first shape, root and reduce op) on the same Gloo group and
// compares them; a disagreement raises the same clear ValueError on every
// rank, naming what each rank passed.
//
// Waiting for that exchange before every collective would double the latency
// of small ones, so a rank waits only when its call is not the one predicted.
// Each group remembers, for every signature, the call that followed it last
// time (a training loop repeats its collectives), and predicts the next call
// from the last one. Every rank makes the same prediction: it comes from the
// group's history, which is the same on every rank because every rank adds
// the same call to it (below). Then:
// - a rank whose call is the predicted one issues it right after starting
//   the exchange; its Work checks the exchange before it completes;
// - a rank whose call is not waits for the exchange before it sends anything.
// Data moves before agreement only if every rank made the predicted call, so
// Gloo never sees two sizes. If some ranks ran ahead and another disagrees,
// the ones ahead are inside a collective the others never called: each rank
// that waited joins it with a decoy (the predicted collective on zeros, made
// from the recipe kept with the prediction) so that it completes, adds the
// predicted call to its history as the others did, and raises. Every rank
// gets the ValueError, the ones ahead hold no result in their tensors, and
// the group lives on. Only calls a decoy can stand in for run ahead: one
// tensor, a collective whose sizes its signature fixes (Backend.cpp).
//
// OPENREG_DIST_CHECK=0 skips the exchange, for programs known to be
// consistent (benchmarks/bench_distributed.py measures both).

#include <ATen/core/Tensor.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>

#include <array>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace openreg::distributed {

// False when OPENREG_DIST_CHECK=0.
bool agreement_checked();

// Issues, on the transport, a collective of the shape of a remembered call,
// on zeros: what a rank that waited joins the ranks ahead with.
using Decoy = std::function<c10::intrusive_ptr<c10d::Work>(c10d::Backend& transport)>;

// What every rank of a group must pass alike for one collective.
struct Signature {
  static constexpr int kMaxDims = 6;
  // collective, dtype, tensors, elements, root, reduce op, ndim, sizes.
  static constexpr int kFields = 7 + kMaxDims;
  std::array<int64_t, kFields> fields;

  // `root` and `reduce_op` are -1 where the collective has none.
  Signature(std::string_view op, const std::vector<at::Tensor>& tensors, int64_t root,
            int64_t reduce_op);
  Signature() : fields{} {}
  bool operator==(const Signature& other) const {
    return fields == other.fields;
  }
  size_t hash() const;
};

class Agreement;

// One exchange of signatures, started for a collective.
class Exchange {
 public:
  Exchange(std::shared_ptr<Agreement> agreement, std::string op, const Signature& mine, bool ahead);

  // The transport's Work of the exchange.
  const c10::intrusive_ptr<c10d::Work>& work() const {
    return work_;
  }
  // Whether this rank issued its collective without waiting for the exchange.
  bool ahead() const {
    return ahead_;
  }
  // Raises the clear ValueError when the ranks disagree; call once the
  // exchange's work has completed (its own errors are the caller's).
  void verify();
  // Whether some rank issued its collective without waiting (after verify).
  bool anyone_ahead() const {
    return anyone_ahead_;
  }

 private:
  friend class Agreement;
  std::shared_ptr<Agreement> agreement_;
  std::string op_;
  bool ahead_;
  at::Tensor row_;   // this rank's signature
  at::Tensor rows_;  // every rank's
  c10::intrusive_ptr<c10d::Work> work_;
  std::once_flag verified_;
  std::string disagreement_;  // empty when the ranks agree
  bool anyone_ahead_ = false;
};

// A group's history of agreed calls and its predictions
// (Note [Ranks agree before Gloo runs]).
class Agreement : public std::enable_shared_from_this<Agreement> {
 public:
  explicit Agreement(c10::intrusive_ptr<c10d::Backend> transport)
      : transport_(std::move(transport)) {}

  // Before a collective that needs agreement (the caller issues collectives
  // of the group one at a time). Returns nullptr when the check is off or
  // the group has one rank. When the call is not the predicted one, waits for
  // the exchange and raises on disagreement before returning it; otherwise
  // returns it still running, for the collective's Work to verify. `decoy`
  // stands in for this call (null: it never runs ahead).
  std::shared_ptr<Exchange> start(std::string_view op, const Signature& mine, Decoy decoy);

 private:
  friend class Exchange;
  struct Call {
    Signature sig;
    Decoy decoy;
  };
  void remember(const Call& call);  // under mutex_

  c10::intrusive_ptr<c10d::Backend> transport_;
  std::mutex mutex_;
  std::optional<Call> last_;
  std::unordered_map<size_t, Call> next_;  // by the hash of the call before
};

}  // namespace openreg::distributed

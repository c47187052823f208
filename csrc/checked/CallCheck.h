#pragma once

// Note [The agreement layer]
// What the checked collectives (CheckedBackend.cpp) ask of the agreement, in one place:
// before a collective, `before` compares the call with the group's other
// ranks (Note [Ranks agree before Gloo runs]) and raises their disagreement,
// or this rank's refusal once they agree; a send and its recv compare through
// `send` and `recv` (Note [A send meets its recv]). The backend describes a
// call's terms (which tensors the ranks compare, its root and reduce op, why
// it refuses it, the decoy that may stand in for it) and keeps no agreement
// state. The layer needs only a transport (any c10d::Backend: the decoys run
// on it) and the group's store, so it serves any backend the checked
// collectives wrap. OPENREG_DIST_CHECK=0 turns it off.

#include "checked/Agreement.h"
#include "checked/PeerCheck.h"

#include <ATen/core/Tensor.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace openreg::checked {

// What the ranks of a group must agree on for one call.
struct Terms {
  // False: not compared across the group (a send or recv, compared between
  // its two ranks; a barrier, its own check).
  bool checked = true;
  std::vector<at::Tensor> agree;  // the tensors every rank passes alike
  int64_t root = -1;
  int64_t reduce_op = -1;  // as the caller asked (AVG before it becomes SUM)
  // all_to_all: sizes differ between ranks, the split sizes are compared
  // instead (Note [Split sizes agree]).
  bool sizes_differ = false;
  std::vector<int64_t> splits;
  // Why this rank cannot run the call ("": it can), raised on every rank
  // once the ranks agree; `not_dense` when that is a tensor that is not dense.
  std::string refusal;
  bool not_dense = false;
  Decoy decoy;  // null: this call never runs ahead of the agreement
};

class CallCheck {
 public:
  // Compares nothing when OPENREG_DIST_CHECK=0 or the group has one rank.
  CallCheck(const c10::intrusive_ptr<c10d::Backend>& transport,
            const c10::intrusive_ptr<c10d::Store>& store, const std::string& group_name);

  // Before call `op` numbered `seq` in the group, on `device`: raises the
  // ranks' disagreement, or the refusal once they agree (`who` names the call
  // in it); returns the call when it runs ahead (its Work watches it).
  std::shared_ptr<AheadCall> before(const char* op, Terms terms, c10::DeviceType device,
                                    int64_t seq, const std::string& who);

  // A send of `tensors` to `dst`: the step its Work finishes with (null when
  // unchecked).
  std::function<void()> send(int dst, const std::vector<at::Tensor>& tensors);
  // A recv from `src` into `tensors`: `receive` issues it once the sender's
  // row is read, or at once when unchecked.
  c10::intrusive_ptr<c10d::Work> recv(int src, std::vector<at::Tensor> tensors,
                                      PeerCheck::Receive receive);

  std::weak_ptr<Agreement> agreement() const {
    return agreement_;
  }
  void stop();
  // This rank leaves the group before its call `next_seq`: the others stop
  // waiting for it (Note [A rank that left]). Never raises.
  void leave(int64_t next_seq, Leaving how) noexcept;

 private:
  std::shared_ptr<Agreement> agreement_;
  std::shared_ptr<PeerCheck> peers_;
};

}  // namespace openreg::checked

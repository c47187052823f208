#pragma once

// Note [Ranks agree before Gloo runs]
// Gloo trusts every rank to pass tensors of the same size: when two ranks
// disagree (one all-reduces 4 floats, the other 8), the rank expecting fewer
// bytes is terminated by Gloo's transport thread, where nothing can catch the
// error; float32 against int32 of the same size sums bit patterns silently.
// So the ranks compare their calls' signatures (the collective, dtype, number
// of tensors and elements, first shape, root and reduce op) in the group's
// store, and a disagreement raises the same clear ValueError on every rank,
// naming what each rank passed.
//
// Comparing before every collective would cost round trips, most of the time
// of a small collective, so a rank compares only when its call is not the
// predicted one. Each group remembers, for every call, the call that followed
// it last time (a training loop repeats its collectives), and predicts the
// next call from the last one. Every rank makes the same prediction, because
// every rank adds the same calls to the group's history (below). Then:
// - a rank whose call is the predicted one issues it at once and posts
//   nothing: it runs "ahead" of the agreement;
// - a rank whose call is not posts its signature and waits for every rank's;
//   when they agree, it issues its call.
// Every rank thus issues one transport collective per call, in the same order.
// If every rank made the predicted call, that is all: the collective
// completes and nobody compared anything. If some did not, the ranks ahead
// are inside a collective the others never called: a watchdog posts the
// signature of any call still running ahead after kAheadGrace, so the ranks
// that wait see the disagreement; each of them joins the ranks ahead with a
// decoy (the predicted collective on zeros, from a recipe kept with the
// prediction) so that their collective completes (Gloo has no way to cancel
// it: aborting the group does not end it), adds the predicted call to its
// history as they did, and raises. The ranks ahead find the disagreement in
// the store (their watchdog, or their Work when it completes after posting)
// and fail with the same ValueError; their tensors hold no result. The group
// lives on. A call ahead that completes without having posted cannot have
// met a disagreement: a decoy is only sent after every rank's row was read.
// Only calls a decoy can stand in for run ahead: one tensor, a collective
// whose sizes its signature fixes (CheckedBackend.cpp).
//
// Signatures are posted in slots ("openreg/agree/<slot>/<rank>" in the store
// of the group's incarnation, Note [A group's incarnations] in
// openreg_lab/device/_distributed.py; the slot is the call's number in the
// group modulo kSlots), each holding its call's number, so the store keeps a
// bounded number of keys per group.
//
// A refusal (a tensor that is not dense, a dtype or reduce op Gloo lacks, a
// malformed list) is part of the signature, not raised before it: a rank
// refusing alone would leave the others waiting for its row. So every rank
// compares first; when they agree, every rank refuses alike, and a refused
// call never runs ahead (it has no decoy). The device type is part of the
// signature too: CPU tensors go through this backend as well
// (Note [One group for openreg and CPU tensors]), so a rank passing a CPU
// tensor where another passes an openreg one is a disagreement.
//
// Note [Split sizes agree]
// all_to_all's ranks pass different sizes by design, so its signature leaves
// out the sizes and carries the split sizes instead: rank r's elements for
// rank q must be the elements rank q expects from r, and each rank's splits
// must add up to its tensors. Every rank checks the whole matrix of rows, so a
// mismatch is the same ValueError everywhere, before Gloo runs.
// OPENREG_DIST_CHECK=0 skips all of it, for programs known to be consistent
// (benchmarks/bench_distributed.py measures both).
//
// Note [A rank that left]
// A rank waiting for its group's rows would wait the whole group timeout (30
// minutes by default) for a rank that has left: Gloo sees a peer's closed
// connection at once, but the agreement only sees a row that never comes. So
// a rank that leaves says so where the others wait: when its group shuts
// down (destroy_process_group), is aborted or destroyed, or its process exits
// (an atexit hook, openreg_lab/device/_distributed.py), it writes a "left"
// row, with why and the number of the first call it never made, into the
// slots of its next kLeftSlots calls, and pushes one on its send queue to
// every peer (Note [A send meets its recv]). A rank waiting for that slot
// wakes at once, as for any row, and fails naming the rank and why; a recv
// from it pops the row after the sends it did make. A call that ran ahead
// (and failed in Gloo, the peer's connection closed) is named the same way:
// its Work looks in the slot for a while before it reports Gloo's error.
// Only a rank itself writes that it left, so a slow rank (one computing for
// an hour) is never taken for gone; a rank that dies without exiting
// (SIGKILL, os._exit) writes nothing and is found by the timeout, as before.
// A forked child does not speak for its parent's rank.

#include <ATen/core/Tensor.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

namespace openreg::checked {

// False when OPENREG_DIST_CHECK=0.
bool agreement_checked();

// Why a rank left its group (Note [A rank that left]).
enum class Leaving : int64_t { kDestroyed = 1, kAborted = 2, kReleased = 3, kExited = 4 };
// "it called destroy_process_group", ...; `code` as stored.
const char* leaving_reason(int64_t code);
// In the error that names the ranks that left (Agreement::who_left).
inline constexpr char kLeftTheGroup[] = "must issue the same collectives before it leaves";

// Issues, on the transport, a collective of the shape of a remembered call,
// on zeros: what a rank that waited joins the ranks ahead with.
using Decoy = std::function<c10::intrusive_ptr<c10d::Work>(c10d::Backend& transport)>;

// What every rank of a group must pass alike for one collective.
struct Signature {
  static constexpr int kMaxDims = 6;
  // collective, device type, dtype, tensors, elements, root, reduce op,
  // flags, ndim, sizes.
  static constexpr int kFields = 9 + kMaxDims;
  // Flags: what the ranks must agree on before this rank refuses its call.
  static constexpr int64_t kNotDense = 1;  // a tensor is not dense (refused)
  static constexpr int64_t kRefused = 2;   // refused for another reason
  std::array<int64_t, kFields> fields;
  // all_to_all's split sizes (Note [Split sizes agree]): elements sent and
  // received in all, then the elements sent to each rank, then received from
  // each rank. Empty for other collectives.
  std::vector<int64_t> splits;

  // `op` is one of the backend's collective names (Agreement.cpp);
  // `root` and `reduce_op` are -1 where the collective has none.
  Signature(std::string_view op, const std::vector<at::Tensor>& tensors, int64_t root,
            int64_t reduce_op, c10::DeviceType device, int64_t flags);
  Signature() : fields{} {}
  bool operator==(const Signature& other) const {
    return fields == other.fields && splits == other.splits;
  }
  size_t hash() const;
  // Forgets the sizes (all_to_all's differ between ranks by design).
  void without_sizes();
};

// A call issued ahead of its ranks' agreement, as its Work and the watchdog
// see it.
struct AheadCall {
  AheadCall(const char* op, int64_t seq, const Signature& sig) : op(op), seq(seq), sig(sig) {}
  const char* op;
  int64_t seq;  // its number in the group, the same on every rank
  Signature sig;
  std::chrono::steady_clock::time_point issued;
  std::atomic<bool> posted{false};  // set before its row is posted
  std::atomic<bool> agreed{false};  // every rank's row was found alike
  std::atomic<bool> over{false};    // its Work finished: the watchdog lets go
  // Set by its Work: finishes it with the disagreement.
  std::function<void(std::exception_ptr)> fail;
};

// A group's history of calls, its predictions, and the comparisons
// (Note [Ranks agree before Gloo runs]).
class Agreement {
 public:
  static constexpr auto kAheadGrace = std::chrono::milliseconds(50);
  static constexpr int64_t kSlots = 1024;
  // The calls after a rank left whose slots say so (Note [A rank that left]);
  // the slots of its last calls keep their rows for the ranks still reading
  // them.
  static constexpr int64_t kLeftSlots = kSlots / 2;

  Agreement(c10::intrusive_ptr<c10d::Backend> transport, c10::intrusive_ptr<c10d::Store> store,
            std::string group_name);
  ~Agreement();
  Agreement(const Agreement&) = delete;
  Agreement& operator=(const Agreement&) = delete;

  // Before a collective that needs agreement, numbered `seq` in the group
  // (the caller issues the group's collectives one at a time); `decoy` stands
  // in for it (null: it never runs ahead). Returns the call when it runs
  // ahead (its Work must hand it to watch()), else nullptr: the check is off,
  // the group has one rank, or the ranks compared and agree (on disagreement,
  // this raises the ValueError).
  std::shared_ptr<AheadCall> start(const char* op, const Signature& mine, int64_t seq, Decoy decoy);

  // Hands a call ahead to the watchdog (`call.fail` set).
  void watch(const std::shared_ptr<AheadCall>& call);
  // A call ahead finished: its disagreement (the ValueError) if the ranks
  // disagreed, else null. Only a call whose row the watchdog posted looks
  // (without it, nobody can have disagreed: Note above).
  std::exception_ptr disagreement(AheadCall& call);

  // Stops the watchdog (the group shuts down).
  void stop();

  // Tells the group's other ranks that this one left before its call
  // `next_seq` (Note [A rank that left]). Never raises.
  void leave(int64_t next_seq, Leaving how) noexcept;
  // Which ranks had left before call `seq`, from their rows in its slot:
  // "rank 1 left the group (its process exited) before this collective; ...",
  // or "" when none did. Looks for up to `patience` (a rank's Gloo connection
  // may close before the store has its row).
  std::string who_left(int64_t seq, std::chrono::milliseconds patience);

 private:
  struct Call {
    Signature sig;
    Decoy decoy;
  };
  void remember(const Call& call);  // under mutex_
  void post(c10d::Store& store, const Signature& sig, int64_t seq, bool ahead);
  // Every rank's row for call `seq` once all are posted (waiting up to
  // `timeout`, none: only looking), or nothing.
  std::optional<std::vector<std::vector<int64_t>>> rows(c10d::Store& store, int64_t seq,
                                                        std::chrono::milliseconds timeout);
  // The disagreement of `rows`, "" when the ranks agree.
  std::string compare(const std::vector<std::vector<int64_t>>& rows, const char* op) const;
  std::string slot_key(int64_t seq, int rank) const;
  void watchdog();

  c10::intrusive_ptr<c10d::Backend> transport_;
  c10::intrusive_ptr<c10d::Store> store_;  // the caller's
  // Its own connection, for the watchdog and the Works ahead: never behind the
  // caller's wait for the ranks' rows.
  c10::intrusive_ptr<c10d::Store> watcher_;
  int rank_;
  int size_;
  std::string group_name_;

  std::mutex mutex_;
  std::optional<size_t> last_key_;         // the hash of the group's last call
  std::unordered_map<size_t, Call> next_;  // by the hash of the call before

  std::mutex watch_mutex_;
  std::condition_variable watch_cv_;
  std::vector<std::shared_ptr<AheadCall>> watched_;
  bool stopping_ = false;
  std::thread watchdog_;  // started with the first call ahead
};

}  // namespace openreg::checked

#include "checked/Agreement.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <sstream>

namespace openreg::checked {

namespace {

using Fields = std::array<int64_t, Signature::kFields>;
using Rows = std::vector<std::vector<int64_t>>;

// Indices into Signature::fields.
enum Field : int {
  kOp,
  kDevice,
  kDtype,
  kTensors,
  kElements,
  kRoot,
  kReduceOp,
  kFlags,
  kDims,
  kSizes
};

// A posted row: the signature, the call's number in the group, whether the
// rank issued it ahead, then the split sizes (if any). A rank that left posts
// a row of -1 but for these two: the first call it never made, and minus why
// it left (Note [A rank that left]).
constexpr int kSeq = Signature::kFields;
constexpr int kAhead = Signature::kFields + 1;
constexpr int kRow = Signature::kFields + 2;

// How often the watchdog looks at the calls ahead.
constexpr auto kWatchdogPeriod = std::chrono::milliseconds(10);

using Clock = std::chrono::steady_clock;

// The checked collectives (CheckedBackend.cpp), by their number in a signature.
constexpr const char* kCollectives[] = {"broadcast",
                                        "allreduce",
                                        "allreduce_coalesced",
                                        "reduce",
                                        "allgather",
                                        "allgather_into_tensor",
                                        "allgather_coalesced",
                                        "allgather_into_tensor_coalesced",
                                        "gather",
                                        "scatter",
                                        "reduce_scatter",
                                        "reduce_scatter_tensor",
                                        "reduce_scatter_tensor_coalesced",
                                        "alltoall_base",
                                        "alltoall",
                                        "send",
                                        "recv",
                                        "barrier"};

int64_t collective_number(std::string_view op) {
  for (size_t i = 0; i < std::size(kCollectives); ++i) {
    if (op == kCollectives[i]) {
      return static_cast<int64_t>(i);
    }
  }
  TORCH_INTERNAL_ASSERT(false, "openreg: no collective named ", op);
}

const char* collective_name(int64_t op) {
  return op >= 0 && op < static_cast<int64_t>(std::size(kCollectives)) ? kCollectives[op]
                                                                       : "an unknown collective";
}

std::exception_ptr value_error(const std::string& what) {
  try {
    TORCH_CHECK_VALUE(false, what);
  } catch (...) {
    return std::current_exception();
  }
  return nullptr;
}

// A group keeps at most this many predictions; past it, it starts again
// (every rank at the same call, since their histories are the same).
constexpr size_t kMaxPredictions = 4096;

std::string reduce_op_name(int64_t op) {
  static constexpr const char* kNames[] = {"SUM",  "AVG", "PRODUCT", "MIN",        "MAX",
                                           "BAND", "BOR", "BXOR",    "PREMUL_SUM", "UNUSED"};
  return op >= 0 && op < static_cast<int64_t>(std::size(kNames))
             ? std::string(kNames[op])
             : "reduce op " + std::to_string(op);
}

// Which parts of the rows to name: those that differ between the ranks.
struct Differs {
  bool op = false;
  bool device = false;
  bool root = false;
  bool reduce_op = false;
  bool flags = false;
};

// What one rank passed, for the error.
std::string describe(const int64_t* s, const Differs& differs) {
  std::ostringstream out;
  if (differs.op) {
    out << collective_name(s[kOp]) << " of ";
  }
  if (s[kTensors] == 0) {
    out << "no tensor";
  } else {
    out << (s[kTensors] == 1 ? "one " : std::to_string(s[kTensors]) + " tensors, the first ")
        << c10::toString(static_cast<at::ScalarType>(s[kDtype])) << " tensor of shape [";
    for (int64_t d = 0; d < s[kDims]; ++d) {
      out << (d ? ", " : "") << (d < Signature::kMaxDims ? std::to_string(s[kSizes + d]) : "...");
      if (d >= Signature::kMaxDims) {
        break;
      }
    }
    out << "]";
    if (s[kTensors] > 1) {
      out << " (" << s[kElements] << " elements in all)";
    }
  }
  if (differs.device) {
    out << " on " << c10::DeviceTypeName(static_cast<c10::DeviceType>(s[kDevice]), true);
  }
  if (differs.root && s[kRoot] >= 0) {
    out << ", root " << s[kRoot];
  }
  if (differs.reduce_op && s[kReduceOp] >= 0) {
    out << ", " << reduce_op_name(s[kReduceOp]);
  }
  if (differs.flags && (s[kFlags] & Signature::kNotDense)) {
    out << ", not dense";
  }
  if (differs.flags && (s[kFlags] & Signature::kRefused)) {
    out << ", which it refuses (its own error says why)";
  }
  return out.str();
}

std::string list(const int64_t* values, int n) {
  std::ostringstream out;
  out << "[";
  for (int i = 0; i < n; ++i) {
    out << (i ? ", " : "") << values[i];
  }
  out << "]";
  return out.str();
}

// The disagreement of all_to_all's split sizes (Note [Split sizes agree]),
// "" when they match.
std::string split_mismatch(const Rows& rows, int size, const char* op, const std::string& group) {
  auto splits = [&](int r) { return rows[r].data() + kRow; };
  bool match = true;
  for (int r = 0; r < size; ++r) {
    if (rows[r].size() != static_cast<size_t>(kRow + 2 + 2 * size)) {
      return "";  // no splits posted: nothing to compare
    }
  }
  for (int r = 0; r < size && match; ++r) {
    const int64_t* s = splits(r);
    int64_t sent = 0;
    int64_t received = 0;
    for (int q = 0; q < size; ++q) {
      sent += s[2 + q];
      received += s[2 + size + q];
      match &= s[2 + q] == splits(q)[2 + size + r];
    }
    match &= sent == s[0] && received == s[1];
  }
  if (match) {
    return "";
  }
  std::ostringstream what;
  what << "openreg " << op << " (group '" << group << "'): the ranks' split sizes do not match (";
  for (int r = 0; r < size; ++r) {
    const int64_t* s = splits(r);
    what << (r ? "; " : "") << "rank " << r << " sends " << list(s + 2, size) << " of " << s[0]
         << " and receives " << list(s + 2 + size, size) << " of " << s[1];
  }
  what << "). Rank r's input split size for rank q must equal rank q's output split size for "
          "rank r, and each rank's splits must add up to its tensor's elements (its first "
          "dimension in all_to_all_single); nothing was sent";
  return what.str();
}

// The ranks whose row in the slot of call `seq` says they left before it
// (Note [A rank that left]), as the error names them; "" when none did. Rows
// shorter than a row are slots not posted.
std::string left_message(const Rows& rows, int64_t seq) {
  std::vector<int> left;
  for (size_t r = 0; r < rows.size(); ++r) {
    if (rows[r].size() >= static_cast<size_t>(kRow) && rows[r][kAhead] < 0 &&
        rows[r][kSeq] <= seq) {
      left.push_back(static_cast<int>(r));
    }
  }
  if (left.empty()) {
    return "";
  }
  auto why = [&](int r) { return leaving_reason(-rows[r][kAhead]); };
  std::ostringstream what;
  if (left.size() == 1) {
    what << "rank " << left[0] << " left the group (" << why(left[0]) << ")";
  } else {
    for (size_t i = 0; i < left.size(); ++i) {
      what << (i == 0                 ? "ranks "
               : i + 1 == left.size() ? " and "
                                      : ", ")
           << left[i] << " (" << why(left[i]) << ")";
    }
    what << " have left the group";
  }
  what << " before this collective: every rank of a group " << kLeftTheGroup;
  return what.str();
}

std::vector<uint8_t> row_bytes(const std::vector<int64_t>& row) {
  const auto* bytes = reinterpret_cast<const uint8_t*>(row.data());
  return std::vector<uint8_t>(bytes, bytes + row.size() * sizeof(int64_t));
}

std::vector<int64_t> parse_row(const std::vector<uint8_t>& bytes, const std::string& key) {
  TORCH_CHECK(bytes.size() >= kRow * sizeof(int64_t) && bytes.size() % sizeof(int64_t) == 0,
              "openreg: a malformed row in the store at ", key);
  std::vector<int64_t> row(bytes.size() / sizeof(int64_t));
  std::memcpy(row.data(), bytes.data(), bytes.size());
  return row;
}

}  // namespace

const char* leaving_reason(int64_t code) {
  switch (static_cast<Leaving>(code)) {
    case Leaving::kDestroyed:
      return "it called destroy_process_group";
    case Leaving::kAborted:
      return "it aborted the group";
    case Leaving::kReleased:
      return "its process group was deleted";
    case Leaving::kExited:
      return "its process exited";
  }
  return "it left";
}

bool agreement_checked() {
  static const bool checked = [] {
    const char* v = std::getenv("OPENREG_DIST_CHECK");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  return checked;
}

Signature::Signature(std::string_view op, const std::vector<at::Tensor>& tensors, int64_t root,
                     int64_t reduce_op, c10::DeviceType device, int64_t flags) {
  fields.fill(-1);
  fields[kOp] = collective_number(op);
  fields[kDevice] = static_cast<int64_t>(device);
  fields[kFlags] = flags;
  fields[kTensors] = static_cast<int64_t>(tensors.size());
  fields[kElements] = 0;
  for (const at::Tensor& t : tensors) {
    fields[kElements] += t.numel();
  }
  fields[kRoot] = root;
  fields[kReduceOp] = reduce_op;
  if (!tensors.empty()) {
    const at::Tensor& first = tensors.front();
    fields[kDtype] = static_cast<int64_t>(first.scalar_type());
    fields[kDims] = first.dim();
    for (int64_t d = 0; d < std::min<int64_t>(first.dim(), kMaxDims); ++d) {
      fields[kSizes + d] = first.size(d);
    }
  }
}

size_t Signature::hash() const {
  size_t h = 0;
  for (int64_t f : fields) {
    h = h * 1000003u ^ std::hash<int64_t>{}(f);
  }
  for (int64_t f : splits) {
    h = h * 1000003u ^ std::hash<int64_t>{}(f);
  }
  return h;
}

void Signature::without_sizes() {
  fields[kElements] = -1;
  std::fill(fields.begin() + kSizes, fields.end(), -1);
}

Agreement::Agreement(c10::intrusive_ptr<c10d::Backend> transport,
                     c10::intrusive_ptr<c10d::Store> store, std::string group_name)
    : transport_(std::move(transport)),
      store_(std::move(store)),
      watcher_(store_->clone()),
      rank_(transport_->getRank()),
      size_(transport_->getSize()),
      group_name_(std::move(group_name)) {}

std::string Agreement::slot_key(int64_t seq, int rank) const {
  return "openreg/agree/" + std::to_string(seq % kSlots) + "/" + std::to_string(rank);
}

Agreement::~Agreement() {
  stop();
}

void Agreement::stop() {
  {
    std::lock_guard<std::mutex> lock(watch_mutex_);
    stopping_ = true;
  }
  watch_cv_.notify_all();
  if (watchdog_.joinable()) {
    watchdog_.join();
  }
}

std::shared_ptr<AheadCall> Agreement::start(const char* op, const Signature& mine, int64_t seq,
                                            Decoy decoy) {
  if (!agreement_checked() || size_ < 2) {
    return nullptr;
  }
  std::optional<Call> predicted;  // copied only when this call is not it
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = last_key_.has_value() ? next_.find(*last_key_) : next_.end();
    if (it != next_.end()) {
      if (it->second.sig == mine && it->second.decoy) {
        last_key_ = mine.hash();  // the history holds this call after the last already
        return std::make_shared<AheadCall>(op, seq, mine);
      }
      predicted = it->second;
    }
  }
  post(*store_, mine, seq, /*ahead=*/false);
  const auto timeout = store_->getTimeout();
  std::optional<Rows> all = rows(*store_, seq, timeout);
  TORCH_CHECK_WITH(DistBackendError, all.has_value(), "openreg ", op, " (group '", group_name_,
                   "'): not every rank of the group called a collective within ", timeout.count(),
                   " ms of this one (a rank stopped, or called something else)");
  const std::string disagreement = compare(*all, op);
  if (disagreement.empty()) {
    std::lock_guard<std::mutex> lock(mutex_);
    remember(Call{mine, std::move(decoy)});
    return nullptr;
  }
  bool anyone_ahead = false;
  for (int r = 0; r < size_; ++r) {
    anyone_ahead |= (*all)[r][kAhead] != 0;
  }
  if (anyone_ahead && predicted.has_value() && predicted->decoy) {
    // They are inside the predicted collective: complete it with them, and
    // remember it as they did (Note [Ranks agree before Gloo runs]).
    try {
      predicted->decoy(*transport_)->wait();
    } catch (const std::exception&) {
      // A rank died on the way: the disagreement is still what to report.
    }
    std::lock_guard<std::mutex> lock(mutex_);
    remember(*predicted);
  }
  TORCH_CHECK_VALUE(false, disagreement);
}

void Agreement::remember(const Call& call) {
  if (last_key_.has_value()) {
    if (next_.size() >= kMaxPredictions && next_.count(*last_key_) == 0) {
      next_.clear();
    }
    next_[*last_key_] = call;
  }
  last_key_ = call.sig.hash();
}

void Agreement::post(c10d::Store& store, const Signature& sig, int64_t seq, bool ahead) {
  std::vector<int64_t> row(kRow + sig.splits.size());
  std::copy(sig.fields.begin(), sig.fields.end(), row.begin());
  row[kSeq] = seq;
  row[kAhead] = ahead ? 1 : 0;
  std::copy(sig.splits.begin(), sig.splits.end(), row.begin() + kRow);
  store.set(slot_key(seq, rank_), row_bytes(row));
}

void Agreement::leave(int64_t next_seq, Leaving how) noexcept {
  if (!agreement_checked() || size_ < 2) {
    return;
  }
  std::vector<int64_t> row(kRow, -1);
  row[kSeq] = next_seq;
  row[kAhead] = -static_cast<int64_t>(how);
  std::vector<std::string> keys;
  for (int64_t seq = next_seq; seq < next_seq + kLeftSlots; ++seq) {
    keys.push_back(slot_key(seq, rank_));
  }
  try {
    watcher_->multiSet(keys, std::vector<std::vector<uint8_t>>(keys.size(), row_bytes(row)));
  } catch (const std::exception&) {
    // The store is gone (its host left first): nobody is left to wait on it.
  }
}

std::string Agreement::who_left(int64_t seq, std::chrono::milliseconds patience) {
  const auto deadline = Clock::now() + patience;
  for (;;) {
    Rows all(size_);
    try {
      for (int r = 0; r < size_; ++r) {
        const std::string key = slot_key(seq, r);
        if (r != rank_ && watcher_->check({key})) {
          all[r] = parse_row(watcher_->get(key), key);
        }
      }
    } catch (const std::exception&) {
      return "";  // the store is gone too: the transport's error stands
    }
    std::string left = left_message(all, seq);
    if (!left.empty() || Clock::now() >= deadline) {
      return left;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

std::optional<Rows> Agreement::rows(c10d::Store& store, int64_t seq,
                                    std::chrono::milliseconds timeout) {
  std::vector<std::string> keys;
  for (int r = 0; r < size_; ++r) {
    keys.push_back(slot_key(seq, r));
  }
  const auto deadline = Clock::now() + timeout;
  if (!store.check(keys)) {
    if (timeout.count() == 0) {
      return std::nullopt;
    }
    try {
      store.wait(keys, timeout);
    } catch (const c10::DistStoreError&) {
      return std::nullopt;  // timed out
    }
  }
  for (;;) {  // a slot may still hold the call kSlots before: wait for this one
    std::vector<std::vector<uint8_t>> values = store.multiGet(keys);
    Rows all(size_);
    bool current = true;
    for (int r = 0; r < size_; ++r) {
      all[r] = parse_row(values[r], keys[r]);
      current &= all[r][kSeq] == seq;
    }
    // A rank that left never posts this row (Note [A rank that left]).
    const std::string left = left_message(all, seq);
    TORCH_CHECK_WITH(DistBackendError, left.empty(), left);
    if (current) {
      return all;
    }
    if (Clock::now() >= deadline) {
      return std::nullopt;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

std::string Agreement::compare(const Rows& rows, const char* op) const {
  auto at = [&](int r, int field) { return rows[r][field]; };
  bool agree = true;
  bool anyone_ahead = false;
  Differs differs;
  for (int r = 0; r < size_; ++r) {
    agree &= std::memcmp(rows[0].data(), rows[r].data(), sizeof(Fields)) == 0;
    anyone_ahead |= at(r, kAhead) != 0;
    differs.op |= at(r, kOp) != at(0, kOp);
    differs.device |= at(r, kDevice) != at(0, kDevice);
    differs.root |= at(r, kRoot) != at(0, kRoot);
    differs.reduce_op |= at(r, kReduceOp) != at(0, kReduceOp);
    differs.flags |= at(r, kFlags) != at(0, kFlags);
  }
  if (agree) {
    return split_mismatch(rows, size_, op, group_name_);
  }
  std::ostringstream what;
  what << "openreg " << op << " (group '" << group_name_ << "'): the ranks of the group passed "
       << (differs.op ? "different collectives" : "different tensors") << " (";
  for (int r = 0; r < size_; ++r) {
    what << (r ? "; " : "") << "rank " << r << ": " << describe(rows[r].data(), differs);
  }
  what << "). Every rank must call the same collective with tensors of the same shape, dtype and "
          "device type; "
       << (anyone_ahead ? "the ranks that had issued it ahead of this check hold no result"
                        : "nothing was sent");
  return what.str();
}

void Agreement::watch(const std::shared_ptr<AheadCall>& call) {
  std::lock_guard<std::mutex> lock(watch_mutex_);
  if (stopping_) {
    return;
  }
  if (!watchdog_.joinable()) {
    watchdog_ = std::thread([this] { watchdog(); });
  }
  call->issued = Clock::now();
  watched_.push_back(call);
  if (watched_.size() == 1) {
    watch_cv_.notify_one();
  }
}

void Agreement::watchdog() {
  std::unique_lock<std::mutex> lock(watch_mutex_);
  while (!stopping_) {
    if (watched_.empty()) {
      watch_cv_.wait(lock, [&] { return stopping_ || !watched_.empty(); });
      continue;
    }
    watch_cv_.wait_for(lock, kWatchdogPeriod, [&] { return stopping_; });
    watched_.erase(std::remove_if(watched_.begin(), watched_.end(),
                                  [](const auto& c) { return c->over || c->agreed; }),
                   watched_.end());
    const auto now = Clock::now();
    std::vector<std::shared_ptr<AheadCall>> late;
    for (const auto& c : watched_) {
      if (now - c->issued >= kAheadGrace) {
        late.push_back(c);
      }
    }
    if (late.empty() || stopping_) {
      continue;
    }
    lock.unlock();
    for (const auto& c : late) {
      try {
        if (!c->posted.exchange(true)) {
          post(*watcher_, c->sig, c->seq, /*ahead=*/true);
        }
        std::optional<Rows> all = rows(*watcher_, c->seq, {});
        if (!all.has_value()) {
          continue;  // not every rank has posted: look again later
        }
        const std::string disagreement = compare(*all, c->op);
        if (disagreement.empty()) {
          c->agreed = true;  // only slow
        } else if (!c->over.exchange(true) && c->fail) {
          c->fail(value_error(disagreement));
        }
      } catch (const c10::DistBackendError&) {
        // A rank left (Note [A rank that left]): its collective cannot complete.
        if (!c->over.exchange(true) && c->fail) {
          c->fail(std::current_exception());
        }
      } catch (const std::exception&) {
        // The store is unreachable: the collective's own timeout will say so.
      }
    }
    lock.lock();
  }
}

std::exception_ptr Agreement::disagreement(AheadCall& call) {
  if (!call.posted) {
    return nullptr;  // nobody can have disagreed (Note [Ranks agree before Gloo runs])
  }
  try {
    std::optional<Rows> all = rows(*watcher_, call.seq, {});
    if (all.has_value()) {
      const std::string disagreement = compare(*all, call.op);
      if (!disagreement.empty()) {
        return value_error(disagreement);
      }
    }
  } catch (const std::exception&) {
    // The store is gone too: the collective's own outcome stands.
  }
  return nullptr;
}

}  // namespace openreg::checked

#include "distributed/Agreement.h"

#include <ATen/ops/empty.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <sstream>

namespace openreg::distributed {

namespace {

using Fields = std::array<int64_t, Signature::kFields>;

// Indices into Signature::fields.
enum Field : int { kOp, kDtype, kTensors, kElements, kRoot, kReduceOp, kDims, kSizes };

// A row of the exchange: the signature, then whether the rank ran ahead.
constexpr int64_t kRow = Signature::kFields + 1;

// A group keeps at most this many predictions; past it, it starts again
// (every rank at the same call, since their histories are the same).
constexpr size_t kMaxPredictions = 4096;

const char* reduce_op_name(int64_t op) {
  static constexpr const char* kNames[] = {"SUM",  "AVG", "PRODUCT", "MIN",        "MAX",
                                           "BAND", "BOR", "BXOR",    "PREMUL_SUM", "UNUSED"};
  return op >= 0 && op < static_cast<int64_t>(std::size(kNames)) ? kNames[op] : "?";
}

// What one rank passed, for the error. `differs` says which of the root and
// the reduce op to name (only those that differ between the ranks).
std::string describe(const int64_t* s, std::string_view op, int64_t own_op, bool root_differs,
                     bool reduce_op_differs) {
  std::ostringstream out;
  if (s[kOp] != own_op) {
    out << "another collective than " << op;
    return out.str();
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
  if (root_differs) {
    out << ", root " << s[kRoot];
  }
  if (reduce_op_differs) {
    out << ", " << reduce_op_name(s[kReduceOp]);
  }
  return out.str();
}

}  // namespace

bool agreement_checked() {
  static const bool checked = [] {
    const char* v = std::getenv("OPENREG_DIST_CHECK");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  return checked;
}

Signature::Signature(std::string_view op, const std::vector<at::Tensor>& tensors, int64_t root,
                     int64_t reduce_op) {
  fields.fill(-1);
  fields[kOp] = static_cast<int64_t>(std::hash<std::string_view>{}(op) >> 1);
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
  return h;
}

Exchange::Exchange(std::shared_ptr<Agreement> agreement, std::string op, const Signature& mine,
                   bool ahead)
    : agreement_(std::move(agreement)), op_(std::move(op)), ahead_(ahead) {
  c10d::Backend& group = *agreement_->transport_;
  row_ = at::empty({kRow}, at::kLong);
  std::memcpy(row_.data_ptr<int64_t>(), mine.fields.data(), sizeof(Fields));
  row_.data_ptr<int64_t>()[Signature::kFields] = ahead ? 1 : 0;
  rows_ = at::empty({group.getSize() * kRow}, at::kLong);
  work_ = group._allgather_base(rows_, row_, c10d::AllgatherOptions());
}

void Exchange::verify() {
  std::call_once(verified_, [&] {
    const int size = static_cast<int>(rows_.numel() / kRow);
    const int64_t* rows = rows_.const_data_ptr<int64_t>();
    const int rank = agreement_->transport_->getRank();
    auto at = [&](int r, int field) { return rows[r * kRow + field]; };
    bool agree = true;
    bool root_differs = false;
    bool reduce_op_differs = false;
    for (int r = 0; r < size; ++r) {
      agree &= std::memcmp(rows, rows + r * kRow, sizeof(Fields)) == 0;
      anyone_ahead_ |= at(r, Signature::kFields) != 0;
      root_differs |= at(r, kRoot) != at(0, kRoot);
      reduce_op_differs |= at(r, kReduceOp) != at(0, kReduceOp);
    }
    if (agree) {
      return;
    }
    std::ostringstream what;
    what << "openreg " << op_ << ": the ranks of the group passed different tensors (";
    for (int r = 0; r < size; ++r) {
      what << (r ? "; " : "") << "rank " << r << ": "
           << describe(rows + r * kRow, op_, at(rank, kOp), root_differs, reduce_op_differs);
    }
    what << "). Every rank must call the same collective with tensors of the same shape and "
            "dtype; "
         << (anyone_ahead_ ? "the ranks that had issued it ahead of this check hold no result"
                           : "nothing was sent");
    disagreement_ = what.str();
  });
  TORCH_CHECK_VALUE(disagreement_.empty(), disagreement_);
}

std::shared_ptr<Exchange> Agreement::start(std::string_view op, const Signature& mine,
                                           Decoy decoy) {
  if (!agreement_checked() || transport_->getSize() < 2) {
    return nullptr;
  }
  std::optional<Call> predicted;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (last_.has_value()) {
      auto it = next_.find(last_->sig.hash());
      if (it != next_.end()) {
        predicted = it->second;
      }
    }
  }
  const bool ahead = predicted.has_value() && predicted->sig == mine && predicted->decoy;
  auto exchange = std::make_shared<Exchange>(shared_from_this(), std::string(op), mine, ahead);
  if (ahead) {
    std::lock_guard<std::mutex> lock(mutex_);
    remember(*predicted);
    return exchange;
  }
  exchange->work()->wait();
  try {
    exchange->verify();
  } catch (const c10::ValueError&) {
    if (exchange->anyone_ahead() && predicted.has_value() && predicted->decoy) {
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
    throw;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  remember(Call{mine, std::move(decoy)});
  return exchange;
}

void Agreement::remember(const Call& call) {
  if (last_.has_value()) {
    const size_t key = last_->sig.hash();
    if (next_.size() >= kMaxPredictions && next_.count(key) == 0) {
      next_.clear();
    }
    next_[key] = call;
  }
  last_ = call;
}

}  // namespace openreg::distributed

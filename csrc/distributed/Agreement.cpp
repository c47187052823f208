#include "distributed/Agreement.h"

#include <ATen/ops/empty.h>
#include <c10/util/Exception.h>

#include <cstdlib>
#include <cstring>
#include <functional>
#include <sstream>

namespace openreg::distributed {

namespace {

constexpr int64_t kMaxDims = 6;
// op hash, dtype, tensors, elements, ndim, then up to kMaxDims sizes.
constexpr int64_t kFields = 5 + kMaxDims;

std::vector<int64_t> summary(std::string_view op, const std::vector<at::Tensor>& tensors) {
  std::vector<int64_t> s(kFields, -1);
  s[0] = static_cast<int64_t>(std::hash<std::string_view>{}(op) >> 1);
  s[2] = static_cast<int64_t>(tensors.size());
  s[3] = 0;
  for (const at::Tensor& t : tensors) {
    s[3] += t.numel();
  }
  if (!tensors.empty()) {
    const at::Tensor& first = tensors.front();
    s[1] = static_cast<int64_t>(first.scalar_type());
    s[4] = first.dim();
    for (int64_t d = 0; d < std::min<int64_t>(first.dim(), kMaxDims); ++d) {
      s[5 + d] = first.size(d);
    }
  }
  return s;
}

std::string describe(const int64_t* s, std::string_view op, int64_t own_op) {
  std::ostringstream out;
  if (s[0] != own_op) {
    out << "another collective than " << op;
    return out.str();
  }
  if (s[2] == 0) {
    out << "no tensor";
    return out.str();
  }
  out << (s[2] == 1 ? "one " : std::to_string(s[2]) + " tensors, the first ")
      << c10::toString(static_cast<at::ScalarType>(s[1])) << " tensor of shape [";
  for (int64_t d = 0; d < s[4]; ++d) {
    out << (d ? ", " : "") << (d < kMaxDims ? std::to_string(s[5 + d]) : "...");
    if (d >= kMaxDims) {
      break;
    }
  }
  out << "]";
  if (s[2] > 1) {
    out << " (" << s[3] << " elements in all)";
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

void check_agreement(c10d::Backend& group, std::string_view op,
                     const std::vector<at::Tensor>& tensors) {
  if (!agreement_checked() || group.getSize() < 2) {
    return;
  }
  const std::vector<int64_t> mine = summary(op, tensors);
  const int size = group.getSize();
  at::Tensor in = at::empty({kFields}, at::kLong);
  std::memcpy(in.data_ptr<int64_t>(), mine.data(), kFields * sizeof(int64_t));
  at::Tensor all = at::empty({size * kFields}, at::kLong);
  group._allgather_base(all, in, c10d::AllgatherOptions())->wait();
  const int64_t* rows = all.const_data_ptr<int64_t>();
  bool agree = true;
  for (int r = 1; r < size; ++r) {
    agree &= std::memcmp(rows, rows + r * kFields, kFields * sizeof(int64_t)) == 0;
  }
  if (agree) {
    return;
  }
  std::ostringstream what;
  what << "openreg " << op << ": the ranks of the group passed different tensors (";
  for (int r = 0; r < size; ++r) {
    what << (r ? "; " : "") << "rank " << r << ": " << describe(rows + r * kFields, op, mine[0]);
  }
  what << "). Every rank must call the same collective with tensors of the same shape and "
          "dtype; nothing was sent";
  TORCH_CHECK_VALUE(false, what.str());
}

}  // namespace openreg::distributed

#include "aten/HostView.h"

#include <c10/core/CPUAllocator.h>
#include <c10/core/TensorImpl.h>

#include <algorithm>
#include <unordered_map>

namespace openreg {

namespace {

// Note [Host views share one storage]
// Two host views of one device storage must be one CPU storage: ATen's
// overlap checks (copy_, TensorIterator's out= and in-place rules) compare
// storages, so views with a storage each would let `buf[1:] = buf[:-1]` or
// `atan2(x[:-1], x[1:], out=x[1:])` run where the CPU raises. Each thread
// keeps the alias storages it made, weakly, by the device bytes they present;
// a live alias of the same bytes is reused. The entries of dead aliases are
// dropped when the table doubles.
struct Alias {
  size_t nbytes;
  c10::weak_intrusive_ptr<c10::StorageImpl> storage;
};

class AliasTable {
 public:
  c10::Storage get(const c10::Storage& device) {
    void* data = const_cast<void*>(device.data());
    const size_t nbytes = device.nbytes();
    auto it = table_.find(data);
    if (it != table_.end() && it->second.nbytes == nbytes) {
      if (c10::intrusive_ptr<c10::StorageImpl> live = it->second.storage.lock()) {
        if (live->data() == data && live->nbytes() == nbytes) {
          return c10::Storage(std::move(live));
        }
      }
    }
    c10::Storage alias(c10::Storage::use_byte_size_t(), nbytes,
                       c10::DataPtr(data, c10::Device(c10::kCPU)),
                       /*allocator=*/nullptr,
                       /*resizable=*/false);
    if (data != nullptr) {
      table_.insert_or_assign(data, Alias{nbytes, alias.getWeakStorageImpl()});
      if (table_.size() > prune_at_) {
        std::erase_if(table_, [](const auto& kv) { return kv.second.storage.expired(); });
        prune_at_ = std::max<size_t>(64, 2 * table_.size());
      }
    }
    return alias;
  }

 private:
  std::unordered_map<void*, Alias> table_;
  size_t prune_at_ = 64;
};

}  // namespace

at::Tensor host_view(const at::Tensor& t) {
  if (!t.defined() || t.device().type() != c10::DeviceType::PrivateUse1) {
    return t;
  }
  thread_local AliasTable aliases;
  auto out = at::detail::make_tensor<c10::TensorImpl>(
      aliases.get(t.storage()), c10::DispatchKeySet(c10::DispatchKey::CPU), t.dtype());
  out.unsafeGetTensorImpl()->set_sizes_and_strides(t.sizes(), t.strides(), t.storage_offset());
  out._set_conj(t.is_conj());
  out._set_neg(t.is_neg());
  return out;
}

std::optional<at::Tensor> host_view(const std::optional<at::Tensor>& t) {
  if (!t.has_value()) {
    return std::nullopt;
  }
  return host_view(*t);
}

std::vector<at::Tensor> host_views(at::TensorList ts) {
  std::vector<at::Tensor> out;
  out.reserve(ts.size());
  for (const auto& t : ts) {
    out.push_back(host_view(t));
  }
  return out;
}

}  // namespace openreg

#include "distributed/HostTensors.h"

#include "aten/HostView.h"

#include <c10/util/Exception.h>

namespace openreg::distributed {

c10::Device common_device(std::string_view op,
                          std::initializer_list<const std::vector<at::Tensor>*> lists) {
  std::optional<c10::Device> device;
  for (const auto* list : lists) {
    for (const at::Tensor& t : *list) {
      if (!t.defined()) {
        continue;
      }
      const c10::Device d = t.device();
      TORCH_CHECK(d.is_cpu() || d.is_privateuseone(), "openreg collective ", op,
                  ": a tensor is on ", d,
                  "; this backend runs collectives on openreg and CPU tensors only");
      if (!device.has_value()) {
        device = d;
      }
      TORCH_CHECK(*device == d, "openreg collective ", op, ": tensors on two devices, ", *device,
                  " and ", d,
                  "; move them to one device first (every tensor of a collective must be on "
                  "the same device)");
      TORCH_CHECK(t.layout() == c10::kStrided, "openreg collective ", op,
                  ": only dense (strided) tensors are supported, got a ", t.layout(), " tensor");
    }
  }
  return device.value_or(c10::Device(c10::DeviceType::CPU));
}

std::vector<at::Tensor> host_views(const std::vector<at::Tensor>& tensors) {
  return openreg::host_views(tensors);
}

std::vector<std::vector<at::Tensor>> host_views(const std::vector<std::vector<at::Tensor>>& lists) {
  std::vector<std::vector<at::Tensor>> out;
  out.reserve(lists.size());
  for (const auto& list : lists) {
    out.push_back(openreg::host_views(list));
  }
  return out;
}

int64_t nbytes(const std::vector<at::Tensor>& tensors) {
  int64_t n = 0;
  for (const at::Tensor& t : tensors) {
    if (t.defined()) {
      n += static_cast<int64_t>(t.nbytes());
    }
  }
  return n;
}

std::vector<at::Tensor> flatten(const std::vector<std::vector<at::Tensor>>& lists) {
  std::vector<at::Tensor> out;
  for (const auto& list : lists) {
    out.insert(out.end(), list.begin(), list.end());
  }
  return out;
}

}  // namespace openreg::distributed

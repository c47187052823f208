// The format tag of openreg tensors and its serialization: Note [Backend
// metadata] in BackendMeta.h.

#include "runtime/BackendMeta.h"

#include <c10/core/TensorImpl.h>
#include <c10/util/Exception.h>
#include <torch/csrc/jit/serialization/pickler_helper.h>

#include <algorithm>
#include <unordered_map>
#include <utility>

namespace openreg {
namespace {

constexpr std::string_view kKeyPrefix = "openreg.format.";

struct FormatMeta final : c10::BackendMeta {
  explicit FormatMeta(std::string f) : format(std::move(f)) {}
  // A shallow copy (detach, ...) gets its own record with the same tag.
  c10::intrusive_ptr<c10::BackendMeta> clone(
      const c10::intrusive_ptr<c10::BackendMeta>& /*self*/) const override {
    return c10::make_intrusive<FormatMeta>(format);
  }
  std::string format;
};

bool known(std::string_view format) {
  const auto& all = backend_formats();
  return std::find(all.begin(), all.end(), format) != all.end();
}

std::string known_list() {
  std::string out;
  for (const std::string& f : backend_formats()) {
    out += (out.empty() ? "" : ", ") + f;
  }
  return out;
}

// torch.save: the tag as one key of the tensor's metadata map.
void save_meta(const at::Tensor& t, std::unordered_map<std::string, bool>& metadata) {
  const std::string format = backend_format(t);
  if (format != "plain") {
    metadata[std::string(kKeyPrefix) + format] = true;
  }
}

// torch.load onto openreg: the key back into a tag.
void load_meta(const at::Tensor& t, std::unordered_map<std::string, bool>& metadata) {
  for (const auto& [key, value] : metadata) {
    if (!value || key.rfind(kKeyPrefix, 0) != 0) {
      continue;
    }
    const std::string format = key.substr(kKeyPrefix.size());
    TORCH_CHECK(known(format), "torch.load: the checkpoint tags an openreg tensor with format '",
                format, "', which this openreg_lab does not know (known: ", known_list(),
                "); load it with a version that knows it, or with map_location=\"cpu\"");
    set_backend_format(t, format);
  }
}

struct MetaRegistration {
  MetaRegistration() {
    torch::jit::TensorBackendMetaRegistry(c10::DeviceType::PrivateUse1, &save_meta, &load_meta);
  }
};

const MetaRegistration meta_registration;

}  // namespace

const std::vector<std::string>& backend_formats() {
  static const std::vector<std::string> formats = {"plain", "nc4hw4", "tiled16"};
  return formats;
}

std::string backend_format(const at::Tensor& t) {
  TORCH_CHECK(t.defined() && t.device().type() == c10::DeviceType::PrivateUse1,
              "backend_format: expected an openreg tensor, got ",
              t.defined() ? t.device().str() : std::string("an undefined tensor"));
  const auto* meta = dynamic_cast<const FormatMeta*>(t.unsafeGetTensorImpl()->get_backend_meta());
  return meta != nullptr ? meta->format : "plain";
}

void set_backend_format(const at::Tensor& t, std::string_view format) {
  TORCH_CHECK(t.defined() && t.device().type() == c10::DeviceType::PrivateUse1,
              "set_backend_format: expected an openreg tensor, got ",
              t.defined() ? t.device().str() : std::string("an undefined tensor"));
  TORCH_CHECK_VALUE(known(format), "unknown openreg format '", format, "': known formats are ",
                    known_list());
  c10::TensorImpl* impl = t.unsafeGetTensorImpl();
  if (format == "plain") {
    if (impl->get_backend_meta() != nullptr) {
      impl->set_backend_meta(c10::intrusive_ptr<c10::BackendMeta>());
    }
    return;
  }
  impl->set_backend_meta(c10::make_intrusive<FormatMeta>(std::string(format)));
}

}  // namespace openreg

#include "runtime/Generator.h"

#include "runtime/Device.h"

#include <ATen/CPUGeneratorImpl.h>
#include <c10/util/Exception.h>

#include <array>

namespace openreg {

Generator::Generator(c10::DeviceIndex device)
    : c10::GeneratorImpl(c10::Device(c10::DeviceType::PrivateUse1, device),
                         c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
      engine_(at::make_generator<at::CPUGeneratorImpl>()) {}

void Generator::set_current_seed(uint64_t seed) {
  engine_.set_current_seed(seed);
}

void Generator::set_offset(uint64_t offset) {
  engine_.set_offset(offset);
}

uint64_t Generator::get_offset() const {
  return engine_.get_offset();
}

uint64_t Generator::current_seed() const {
  return engine_.current_seed();
}

uint64_t Generator::seed() {
  return engine_.seed();
}

void Generator::set_state(const c10::TensorImpl& new_state) {
  engine_.unsafeGetGeneratorImpl()->set_state(new_state);
}

c10::intrusive_ptr<c10::TensorImpl> Generator::get_state() const {
  return engine_.unsafeGetGeneratorImpl()->get_state();
}

Generator* Generator::clone_impl() const {
  auto* copy = new Generator(device().index());
  copy->engine_ = engine_.clone();
  return copy;
}

const at::Generator& default_generator(c10::DeviceIndex device) {
  static std::array<at::Generator, kMaxDevices>* generators = [] {
    auto* gens = new std::array<at::Generator, kMaxDevices>();
    for (c10::DeviceIndex d = 0; d < device_count(); ++d) {
      (*gens)[d] = at::make_generator<Generator>(d);
      (*gens)[d].set_current_seed(c10::detail::getNonDeterministicRandom());
    }
    return gens;
  }();
  const c10::DeviceIndex d = device == -1 ? current_device() : device;
  check_device_index(d);
  return (*generators)[d];
}

at::Generator new_generator(c10::DeviceIndex device) {
  const c10::DeviceIndex d = device == -1 ? current_device() : device;
  check_device_index(d);
  return at::make_generator<Generator>(d);
}

at::Generator engine_for(const std::optional<at::Generator>& gen, c10::DeviceIndex device) {
  const at::Generator& g = gen.has_value() && gen->defined() ? *gen : default_generator(device);
  auto* impl = dynamic_cast<Generator*>(g.unsafeGetGeneratorImpl());
  TORCH_CHECK(impl != nullptr,
              "expected an openreg generator for a tensor on openreg, got a generator "
              "on ",
              g.device(), ": create it with torch.Generator(device='openreg')");
  return impl->engine();
}

}  // namespace openreg

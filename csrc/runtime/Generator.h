#pragma once

// Random number generators: one default generator per openreg device.
//
// Each openreg generator owns a CPU generator (mt19937) and
// forwards its state to it. Random kernels (aten/Random.cpp) run the CPU
// sampling code on device memory with that inner generator, so the same seed
// gives the same numbers on openreg as on CPU.

#include <ATen/core/Generator.h>
#include <c10/core/GeneratorImpl.h>

namespace openreg {

class Generator final : public c10::GeneratorImpl {
 public:
  explicit Generator(c10::DeviceIndex device);

  void set_current_seed(uint64_t seed) override;
  void set_offset(uint64_t offset) override;
  uint64_t get_offset() const override;
  uint64_t current_seed() const override;
  uint64_t seed() override;
  void set_state(const c10::TensorImpl& new_state) override;
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override;

  static c10::DeviceType device_type() {
    return c10::DeviceType::PrivateUse1;
  }

  // The CPU generator that draws the numbers.
  const at::Generator& engine() const {
    return engine_;
  }

 private:
  Generator* clone_impl() const override;
  at::Generator engine_;
};

const at::Generator& default_generator(c10::DeviceIndex device);
at::Generator new_generator(c10::DeviceIndex device);

// The CPU engine behind `gen`, or behind the default generator of `device`
// when `gen` is empty. Throws when `gen` is not an openreg generator.
at::Generator engine_for(const std::optional<at::Generator>& gen, c10::DeviceIndex device);

}  // namespace openreg

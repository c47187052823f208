// In-place random sampling on openreg memory with openreg's generators.
// These are what torch.randn / rand / randint / dropout reach. The CPU
// sampling code runs on the device memory (Note [Device memory is host
// memory]) with the CPU engine of the openreg generator (runtime/Generator.h),
// so a seed gives the same numbers as on CPU.

#include "aten/HostView.h"
#include "aten/Registration.h"
#include "runtime/Generator.h"

namespace openreg {
namespace {

at::Generator engine(const at::Tensor& self, const std::optional<at::Generator>& gen) {
  return engine_for(gen, self.device().index());
}

at::Tensor& normal_(at::Tensor& self, double mean, double std, std::optional<at::Generator> gen) {
  host_view(self).normal_(mean, std, engine(self, gen));
  return self;
}

at::Tensor& uniform_(at::Tensor& self, double from, double to, std::optional<at::Generator> gen) {
  host_view(self).uniform_(from, to, engine(self, gen));
  return self;
}

at::Tensor& exponential_(at::Tensor& self, double lambd, std::optional<at::Generator> gen) {
  host_view(self).exponential_(lambd, engine(self, gen));
  return self;
}

at::Tensor& bernoulli_float(at::Tensor& self, double p, std::optional<at::Generator> gen) {
  host_view(self).bernoulli_(p, engine(self, gen));
  return self;
}

at::Tensor& bernoulli_tensor(at::Tensor& self, const at::Tensor& p,
                             std::optional<at::Generator> gen) {
  host_view(self).bernoulli_(host_view(p), engine(self, gen));
  return self;
}

at::Tensor& random_(at::Tensor& self, std::optional<at::Generator> gen) {
  host_view(self).random_(engine(self, gen));
  return self;
}

at::Tensor& random_to(at::Tensor& self, int64_t to, std::optional<at::Generator> gen) {
  host_view(self).random_(to, engine(self, gen));
  return self;
}

at::Tensor& random_from(at::Tensor& self, int64_t from, std::optional<int64_t> to,
                        std::optional<at::Generator> gen) {
  host_view(self).random_(from, to, engine(self, gen));
  return self;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  OPENREG_IMPL(m, "normal_", normal_);
  OPENREG_IMPL(m, "uniform_", uniform_);
  OPENREG_IMPL(m, "exponential_", exponential_);
  OPENREG_IMPL(m, "bernoulli_.float", bernoulli_float);
  OPENREG_IMPL(m, "bernoulli_.Tensor", bernoulli_tensor);
  OPENREG_IMPL(m, "random_", random_);
  OPENREG_IMPL(m, "random_.to", random_to);
  OPENREG_IMPL(m, "random_.from", random_from);
}

}  // namespace openreg

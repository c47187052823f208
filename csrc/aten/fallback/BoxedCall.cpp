// The run loop the fallback and the generic native path share: Note [One
// boxed call, two ways to run it] in BoxedCall.h.

#include "aten/fallback/BoxedCall.h"

#include "aten/fallback/BoxedArguments.h"
#include "runtime/Device.h"
#include "runtime/Generator.h"

#include <c10/core/DeviceGuard.h>

namespace openreg {
namespace {

constexpr auto kOpenReg = c10::DeviceType::PrivateUse1;

// Note [Schemas that under-report mutation]
// A few legacy operators write to arguments their schema does not mark as
// mutable (no `(a!)`). A boxed call must still treat those arguments as
// written, or the write is silently lost. Each entry names the operator, the
// arguments it writes, and the bool argument that must be true for the write
// to happen.
struct HiddenMutation {
  const char* op;  // name without overload
  const char* overload;
  std::vector<const char*> args;
  const char* only_if;
};

const std::vector<HiddenMutation>& hidden_mutations() {
  static const std::vector<HiddenMutation> table = {
      // Updates the running statistics in training mode; its successor
      // _native_batch_norm_legit declares them as Tensor(a!).
      {"aten::native_batch_norm", "", {"running_mean", "running_var"}, "training"},
  };
  return table;
}

const HiddenMutation* hidden_mutation(const c10::FunctionSchema& schema) {
  for (const HiddenMutation& h : hidden_mutations()) {
    if (schema.name() == h.op && schema.overload_name() == h.overload) {
      return &h;
    }
  }
  return nullptr;
}

// Which arguments the call writes: by its schema, or by the table above.
std::vector<bool> written_arguments(const c10::FunctionSchema& schema,
                                    const torch::jit::Stack& stack, size_t first) {
  const size_t n = schema.arguments().size();
  std::vector<bool> written(n);
  for (size_t i = 0; i < n; ++i) {
    written[i] = is_written(schema.arguments()[i]);
  }
  if (const HiddenMutation* h = hidden_mutation(schema)) {
    auto flag = schema.argumentIndexWithName(h->only_if);
    if (!flag.has_value() || stack[first + *flag].toBool()) {
      for (const char* name : h->args) {
        if (auto i = schema.argumentIndexWithName(name)) {
          written[*i] = true;
        }
      }
    }
  }
  return written;
}

}  // namespace

BoxedCall::BoxedCall(const c10::OperatorHandle& op, torch::jit::Stack* stack, const char* path)
    : op_(op),
      schema_(op.schema()),
      stack_(stack),
      num_args_(schema_.arguments().size()),
      first_arg_(stack->size() - num_args_),
      path_(path) {}

void BoxedCall::run_on_host() {
  find_device();
  c10::DeviceGuard guard(device_);
  written_ = written_arguments(schema_, *stack_, first_arg_);
  before_arguments();
  std::vector<c10::IValue> originals(stack_->begin() + first_arg_, stack_->end());
  for (size_t i = 0; i < num_args_; ++i) {
    c10::IValue& v = (*stack_)[first_arg_ + i];
    v = to_host(v, schema_.arguments()[i]);
  }
  std::vector<c10::IValue> host_args(stack_->begin() + first_arg_, stack_->end());

  run_kernel();

  after_kernel();
  for (size_t i = 0; i < num_args_; ++i) {
    if (written_[i]) {
      write_back(originals[i], host_args[i]);
    }
  }
  const size_t num_returns = schema_.returns().size();
  const size_t first_ret = stack_->size() - num_returns;
  for (size_t j = 0; j < num_returns; ++j) {
    const c10::Argument& ret = schema_.returns()[j];
    c10::IValue& v = (*stack_)[first_ret + j];
    const int arg = aliased_argument(schema_, ret);
    if (arg >= 0 && is_written(ret)) {
      v = originals[arg];  // in-place / out=: the caller's own tensor
    } else {
      v = result_to_device(v, arg >= 0 ? &originals[arg] : nullptr);
    }
  }
}

c10::IValue BoxedCall::to_host(const c10::IValue& v, const c10::Argument& arg) {
  if (v.isTensor()) {
    return tensor_to_host(v.toTensor(), arg.is_out());
  }
  if (is_tensor_list(v)) {
    return map_tensors(v, [&](const at::Tensor& t) { return tensor_to_host(t, false); });
  }
  if (v.isDevice() && v.toDevice().type() == kOpenReg) {
    return c10::Device(c10::kCPU);
  }
  if (is_optional_generator(arg)) {
    // Random ops sample with openreg's generator, not the CPU default one.
    std::optional<at::Generator> gen;
    if (v.isGenerator()) {
      gen = v.toGenerator();
    }
    if (!gen.has_value() || gen->device().type() == kOpenReg) {
      return engine_for(gen, device_.index());
    }
  }
  return v;
}

// Note [Fallback device rules]
// The openreg tensors of one call must all be on the same device. CPU tensors
// may join them only as 0-dim scalars, as the `indices` of an indexing op, or
// as an argument the schema names `cpu_...` (a nested tensor's sizes, which
// live on the host), as on CUDA. Anything else raises PyTorch's usual
// "Expected all tensors to be on the same device". A call with no openreg
// tensor and no openreg `device=` runs on the current device.
void BoxedCall::find_device() {
  for (size_t i = 0; i < num_args_; ++i) {
    const c10::IValue& v = (*stack_)[first_arg_ + i];
    const std::string& name = schema_.arguments()[i].name();
    if (v.isTensor()) {
      check_tensor(v.toTensor(), name.rfind("cpu_", 0) == 0);
    } else if (v.isList()) {
      for (const c10::IValue& e : v.toListRef()) {
        if (e.isTensor()) {
          check_tensor(e.toTensor(), name == "indices");
        }
      }
    } else if (v.isDevice() && v.toDevice().type() == kOpenReg) {
      note_device(v.toDevice());
    }
  }
  for (const c10::Device& cpu : cpu_tensor_devices_) {
    if (found_.has_value()) {
      mismatch(*found_, cpu);
    }
  }
  device_ = found_.value_or(c10::Device(kOpenReg, current_device()));
}

void BoxedCall::check_tensor(const at::Tensor& t, bool may_be_cpu) {
  if (!t.defined()) {
    return;
  }
  if (on_openreg(t)) {
    note_device(t.device());
  } else if (t.dim() > 0 && !may_be_cpu) {
    cpu_tensor_devices_.push_back(t.device());
  }
}

void BoxedCall::note_device(c10::Device d) {
  if (d.index() < 0) {
    d = c10::Device(kOpenReg, current_device());
  }
  if (!found_.has_value()) {
    found_ = d;
  } else if (*found_ != d) {
    mismatch(*found_, d);
  }
}

void BoxedCall::mismatch(c10::Device a, c10::Device b) const {
  TORCH_CHECK(false,
              "Expected all tensors to be on the same device, but found at least two devices, ", a,
              " and ", b, "! (in ", c10::toString(schema_.operator_name()), ", which runs through ",
              path_, ")");
}

}  // namespace openreg

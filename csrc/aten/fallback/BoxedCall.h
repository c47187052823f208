#pragma once

// Note [One boxed call, two ways to run it]
// The boxed CPU fallback (Fallback.cpp) and the generic native path
// (GenericNative.cpp) both run an operator's CPU kernel for a call made on
// openreg tensors, and share everything but how bytes reach the host:
//   1. the call's device, by Note [Fallback device rules];
//   2. each argument for the host: openreg tensors through tensor_to_host
//      (the fallback copies, the generic path aliases device memory),
//      `device=openreg` arguments become cpu, openreg generators (and a
//      missing one) become their device's CPU engine;
//   3. the CPU kernel (run_kernel);
//   4. the arguments the call writes back into the caller's tensors
//      (write_back), the written ones found by the schema and by Note
//      [Schemas that under-report mutation];
//   5. the results: an in-place or out= result is the caller's own tensor,
//      any other goes through result_to_device.
// BoxedCall is that run loop; the two paths are its subclasses.

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <c10/core/Device.h>

#include <optional>
#include <vector>

namespace openreg {

class BoxedCall {
 public:
  // `path` names the way in error messages ("openreg's CPU fallback").
  BoxedCall(const c10::OperatorHandle& op, torch::jit::Stack* stack, const char* path);
  virtual ~BoxedCall() = default;
  BoxedCall(const BoxedCall&) = delete;
  BoxedCall& operator=(const BoxedCall&) = delete;

 protected:
  // Steps 1 to 5 of the Note: find the device, then run under its guard.
  void run_on_host();

  // Step 1 alone (Note [Fallback device rules]); sets device_.
  void find_device();

  // Before step 2: the CPU keys are known, nothing has moved yet.
  virtual void before_arguments() {}
  virtual at::Tensor tensor_to_host(const at::Tensor& t, bool is_out) = 0;
  virtual void run_kernel() = 0;
  // After the kernel, before any write_back.
  virtual void after_kernel() {}
  virtual void write_back(const c10::IValue& original, const c10::IValue& host) = 0;
  // A result that is not the caller's own tensor; `aliased` is the argument
  // the schema says it aliases (a view op), or nullptr.
  virtual c10::IValue result_to_device(const c10::IValue& result, const c10::IValue* aliased) = 0;

  const c10::OperatorHandle& op_;
  const c10::FunctionSchema& schema_;
  torch::jit::Stack* stack_;
  const size_t num_args_;
  const size_t first_arg_;
  c10::Device device_{c10::DeviceType::PrivateUse1};
  std::vector<bool> written_;  // per argument: does the call write it?

 private:
  c10::IValue to_host(const c10::IValue& v, const c10::Argument& arg);
  void check_tensor(const at::Tensor& t, bool may_be_cpu);
  void note_device(c10::Device d);
  [[noreturn]] void mismatch(c10::Device a, c10::Device b) const;

  const char* path_;
  std::optional<c10::Device> found_;
  std::vector<c10::Device> cpu_tensor_devices_;
};

}  // namespace openreg

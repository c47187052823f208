#include "trace/KernelEvents.h"

#include "trace/Clock.h"
#include "trace/Hooks.h"
#include "trace/OpLookup.h"
#include "trace/OpObserver.h"

#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <string>

namespace openreg::trace {
namespace {

// The operator of the innermost recording KernelScope of this thread (its
// interned name, 0: none), for the boxed fallback's rule.
thread_local uint32_t tls_kernel_op = 0;

// Collects the key set, the first openreg device and (when asked) the shapes
// of one call's arguments.
class Arguments final : public seam::ArgSink {
 public:
  explicit Arguments(std::vector<int64_t>* pool) : pool_(pool) {
    if (pool_ != nullptr) {
      offset_ = begin_shapes(*pool_);
    }
  }
  void tensor(const at::Tensor& t) override {
    if (pool_ != nullptr) {
      append_shape(*pool_, offset_, t);
    }
    if (!t.defined()) {
      return;
    }
    keys_ = keys_ | t.key_set();
    if (is_openreg(t)) {
      note(t.device());
    }
  }
  void device(c10::Device d) override {
    if (d.type() == c10::DeviceType::PrivateUse1) {
      factory_ = true;  // BackendSelect picked openreg from this argument
      note(d);
    }
  }
  uint32_t shapes() const {
    return pool_ != nullptr ? static_cast<uint32_t>(offset_ + 1) : 0;
  }
  int8_t device_index() const {
    if (device_ != kNoDevice) {
      return device_;
    }
    // No openreg argument (a kernel reached through a CPU-only call): the
    // thread's current openreg device is the one it runs on.
    const auto* guard = c10::impl::getDeviceGuardImpl(c10::DeviceType::PrivateUse1);
    return static_cast<int8_t>(std::max<c10::DeviceIndex>(guard->getDevice().index(), 0));
  }
  c10::DispatchKeySet keys() const {
    c10::DispatchKeySet keys = keys_;
    if (factory_ || keys.empty()) {
      keys = keys | c10::DispatchKeySet(c10::DispatchKey::PrivateUse1);
    }
    return with_thread_keys(keys);
  }

 private:
  void note(c10::Device d) {
    if (device_ == kNoDevice) {
      device_ = static_cast<int8_t>(std::max<c10::DeviceIndex>(d.index(), 0));
    }
  }
  std::vector<int64_t>* pool_;
  size_t offset_ = 0;
  c10::DispatchKeySet keys_;
  int8_t device_ = kNoDevice;
  bool factory_ = false;
};

// "add.Tensor" as the aten operator it names.
std::optional<c10::OperatorName> aten_operator(const char* name) {
  const std::string text(name);
  const size_t dot = text.find('.');
  if (dot == std::string::npos) {
    return c10::OperatorName("aten::" + text, "");
  }
  return c10::OperatorName("aten::" + text.substr(0, dot), text.substr(dot + 1));
}

void open(seam::Scope& scope, OpInfo& info, c10::function_ref<void(seam::ArgSink&)> args) {
  Writer w;
  if (!w) {
    return;
  }
  const Options options = w.options();
  // No autograd sequence number: RecordFunction's is not known here. The
  // start time is taken once the arguments are read (below).
  Event e = blank_event(Kind::Op, 0);
  e.name = info.name;
  Arguments seen(options.record_shapes ? &w->pool : nullptr);
  args(seen);
  e.shapes = seen.shapes();
  e.device = seen.device_index();
  const Resolution r = info.table->resolve(seen.keys(), info.resolutions);
  e.dispatch = r.path;
  e.kernel = r.kernel;
  SourceProvider source = source_provider();
  if (options.stack && source != nullptr && w.innermost() < 0) {
    e.source = source();
  }
  e.dur_ns = -1;  // until it ends: still -1 if the trace ends first
  e.start_ns = now_ns();
  w->open.push_back({w.append(e), reinterpret_cast<uint64_t>(&scope)});
  scope.generation = w->generation;
  scope.open = true;
  scope.outer = tls_kernel_op;
  tls_kernel_op = info.name;
}

}  // namespace

void kernel_end(seam::Scope& scope) {
  tls_kernel_op = scope.outer;
  const int64_t end = now_ns();
  Writer w;
  if (w && w->generation == scope.generation) {
    w.end_open(reinterpret_cast<uint64_t>(&scope), end);
  }
}

void kernel_begin(seam::Scope& scope, const char* name,
                  c10::function_ref<void(seam::ArgSink&)> args) {
  if (InternalScope::inside()) {  // Note [The backend's own dispatcher calls]
    return;
  }
  OpInfo* info = find_op(name, [&] { return aten_operator(name); });
  if (info != nullptr) {
    open(scope, *info, args);
  }
}

void kernel_begin_boxed(seam::Scope& scope, const c10::OperatorHandle& op,
                        const torch::jit::Stack& stack) {
  if (InternalScope::inside()) {
    return;
  }
  const c10::OperatorName& name = op.operator_name();
  OpInfo* info = find_op(&name, [&] { return std::optional<c10::OperatorName>(name); });
  if (info == nullptr || info->name == tls_kernel_op) {
    return;  // not an operator, or a native kernel of this op handed it over
  }
  const size_t num_args = op.schema().arguments().size();
  open(scope, *info, [&](seam::ArgSink& sink) {
    for (size_t i = stack.size() - num_args; i < stack.size(); ++i) {
      const c10::IValue& v = stack[i];
      if (v.isTensor()) {
        sink.tensor(v.toTensor());
      } else if (v.isList() && v.isTensorList()) {  // as OpObserver.cpp's for_each_tensor
        for (const at::Tensor& t : v.toTensorList()) {
          sink.tensor(t);
        }
      } else if (v.isDevice()) {
        sink.device(v.toDevice());
      }
    }
  });
}

}  // namespace openreg::trace

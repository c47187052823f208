#include "trace/KernelEvents.h"

#include "trace/Clock.h"
#include "trace/Hooks.h"
#include "trace/Intern.h"
#include "trace/OpLookup.h"
#include "trace/OpObserver.h"

#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <string>

namespace openreg::trace {
namespace {

// The recording KernelScopes of this thread, innermost last, for the boxed
// fallback's rule (a native kernel that hands its call over): a native
// kernel's operator is known by its name's address until the trace closes
// (Note [Kernel events are resolved at close]), a boxed call's by its name.
struct OpenKernel {
  const char* native;  // the native kernel's "add.Tensor", or null
  uint32_t name;       // the boxed call's interned operator name, or 0
};
thread_local std::vector<OpenKernel> tls_open_kernels;

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

// A native kernel's event before its operator is looked up (Note [Kernel
// events are resolved at close]): the kernel's name address in seq and the
// call's key set in bytes, which resolve_kernel_events turns into the event's
// name, dispatch path and kernel.
// Its kernel stays None unless the call ran the fallback or the generic path
// meanwhile (mark_kernel, Hooks.h), as it would be after its resolution.
void mark_unresolved(Event& e, const char* native, c10::DispatchKeySet keys) {
  e.flags |= kUnresolved;
  e.seq = static_cast<int64_t>(reinterpret_cast<intptr_t>(native));
  e.bytes = static_cast<int64_t>(keys.raw_repr());
}

OpInfo* native_op(const char* native) {
  return find_op(native, [&] { return aten_operator(native); });
}

// Whether the innermost recording KernelScope of this thread is a native
// kernel of `info`'s operator (or a boxed call of it), which then handed its
// call to the fallback: that kernel's event is the op's.
bool handed_over(const OpInfo& info) {
  if (tls_open_kernels.empty()) {
    return false;
  }
  const OpenKernel& inner = tls_open_kernels.back();
  if (inner.native == nullptr) {
    return inner.name == info.name;
  }
  const OpInfo* native = native_op(inner.native);
  return native != nullptr && native->name == info.name;
}

// Appends the Op event of a call: `info` resolves it now (the boxed
// fallback's calls), or, when null, `native` names the native kernel and the
// event is resolved when the trace closes.
void open(seam::Scope& scope, OpInfo* info, const char* native,
          c10::function_ref<void(seam::ArgSink&)> args) {
  Writer w;
  if (!w) {
    return;
  }
  const Options options = w.options();
  // No autograd sequence number: RecordFunction's is not known here. The
  // start time is taken once the arguments are read (below).
  Event e = blank_event(Kind::Op, 0);
  Arguments seen(options.record_shapes ? &w->pool : nullptr);
  args(seen);
  e.shapes = seen.shapes();
  e.device = seen.device_index();
  if (info != nullptr) {
    const Resolution r = info->table->resolve(seen.keys(), info->resolutions);
    e.name = info->name;
    e.dispatch = r.path;
    e.kernel = r.kernel;
  } else {
    mark_unresolved(e, native, seen.keys());
  }
  SourceProvider source = source_provider();
  if (options.stack && source != nullptr && w.innermost() < 0) {
    e.source = source();
  }
  e.dur_ns = -1;  // until it ends: still -1 if the trace ends first
  e.start_ns = now_ns();
  w->open.push_back({w.append(e), reinterpret_cast<uint64_t>(&scope)});
  scope.generation = w->generation;
  scope.open = true;
  tls_open_kernels.push_back({native, info != nullptr ? info->name : 0});
}

}  // namespace

void kernel_end(seam::Scope& scope) {
  if (!tls_open_kernels.empty()) {
    tls_open_kernels.pop_back();
  }
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
  // The operator is looked up when the trace closes (Note [Kernel events are
  // resolved at close]).
  open(scope, nullptr, name, args);
}

void kernel_begin_boxed(seam::Scope& scope, const c10::OperatorHandle& op,
                        const torch::jit::Stack& stack) {
  if (InternalScope::inside()) {
    return;
  }
  const c10::OperatorName& name = op.operator_name();
  OpInfo* info = find_op(&name, [&] { return std::optional<c10::OperatorName>(name); });
  if (info == nullptr || handed_over(*info)) {
    return;  // not an operator, or a native kernel of this op handed it over
  }
  const size_t num_args = op.schema().arguments().size();
  open(scope, info, nullptr, [&](seam::ArgSink& sink) {
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

void resolve_kernel_events(std::vector<Event>& events) {
  for (Event& e : events) {
    if (e.kind != static_cast<int8_t>(Kind::Op) || (e.flags & kUnresolved) == 0) {
      continue;
    }
    e.flags &= static_cast<uint8_t>(~kUnresolved);
    const bool marked = e.kernel != static_cast<int8_t>(Kernel::None);  // fallback, generic
    const auto* native = reinterpret_cast<const char*>(static_cast<intptr_t>(e.seq));
    const c10::DispatchKeySet keys(c10::DispatchKeySet::RAW, static_cast<uint64_t>(e.bytes));
    e.seq = -1;
    e.bytes = 0;
    OpInfo* info = native_op(native);
    if (info == nullptr) {
      // Not reached: OPENREG_IMPL registered the kernel for this operator, so
      // the dispatcher knows it. Named as registered rather than lost.
      e.name = intern(std::string("aten::") + native);
      e.kernel = marked ? e.kernel : static_cast<int8_t>(Kernel::Native);
      continue;
    }
    const Resolution r = info->table->resolve(keys, info->resolutions);
    e.name = info->name;
    e.dispatch = r.path;
    e.kernel = marked ? e.kernel : r.kernel;
  }
}

}  // namespace openreg::trace

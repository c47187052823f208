// The parameters an open trace has seen, and where their gradients are
// (Note [Memory categories] in openreg_lab/recording/observations.py).
//
// Note [Gradients seen at each step]
// A training step ends with the gradients of every known parameter in fresh
// storages (zero_grad sets them to None, backward allocates them anew), so
// the trace notes their addresses at each step's end, and the optimizer's
// pre-step hook looks for optimizers it has not seen. Both run right after
// the step's kernels, when the interpreter's working set has left the
// caches: there a line of Python costs several times what it costs in a
// loop (an empty optimizer hook 2.4 us, three array.extend calls 14 us
// against 2.8 us warm), so what matters is how few lines run per step:
// - the gradients are read here, in one call: each known parameter is a
//   weak reference to its TensorImpl (a model deleted inside the trace is
//   freed as it would be), and the call returns their storage addresses;
// - a step's note is one list append of (time, category, addresses), made
//   into arrays when the trace's tables are first read;
// - the pre-step hook returns after one dict lookup for an optimizer every
//   open trace knows (every step but a trace's first).
// On benchmarks/bench_trace.py's MLP step (five steps a trace) the step's
// end went from 45 to 29 us and the hook from 12 to 6 us (medians), and a
// trace with no op events from 1.07-1.08x to 1.055-1.06x the untraced step.

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>
#include <c10/util/intrusive_ptr.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/utils/pybind.h>

#include <pybind11/pybind11.h>

#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>

namespace py = pybind11;

namespace {

using WeakImpl = c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>;

// The address a tensor's storage starts at (what Python's
// `t.untyped_storage().data_ptr()` gives, without materializing a
// copy-on-write storage as that does), or nullopt for a CPU tensor or one with
// no storage of its own (a wrapper subclass, a sparse tensor). The one rule
// for every storage an open trace notes: gradients here, inputs, buffers and
// optimizer state through storage_addresses below.
std::optional<int64_t> device_storage_address(const at::Tensor& t) {
  if (!t.defined() || t.is_cpu() || !t.has_storage()) {
    return std::nullopt;
  }
  try {
    return static_cast<int64_t>(reinterpret_cast<intptr_t>(t.storage().data()));
  } catch (const c10::Error&) {  // a storage whose data may not be read (fake tensors)
    return std::nullopt;
  }
}

class ParamWatch {
 public:
  // The tensors of `params` not known yet (or known by an address that a
  // freed parameter left), now known, in order.
  std::vector<at::Tensor> add(const std::vector<at::Tensor>& params) {
    std::vector<at::Tensor> fresh;
    for (const at::Tensor& p : params) {
      c10::TensorImpl* impl = p.unsafeGetTensorImpl();
      auto it = index_.find(impl);
      if (it != index_.end()) {
        WeakImpl& known = known_[it->second];
        if (known.lock().get() == impl) {
          continue;
        }
        known = WeakImpl(p.getIntrusivePtr());  // the old parameter is gone
      } else {
        index_.emplace(impl, known_.size());
        known_.emplace_back(p.getIntrusivePtr());
      }
      fresh.push_back(p);
    }
    return fresh;
  }

  // The storage addresses of the gradients of the live known parameters
  // (Note [Gradients seen at each step]).
  std::vector<int64_t> grad_addresses() const {
    std::vector<int64_t> out;
    out.reserve(known_.size());
    for (const WeakImpl& weak : known_) {
      auto impl = weak.lock();
      if (!impl) {
        continue;
      }
      const at::Tensor param(std::move(impl));
      if (auto address = device_storage_address(param.grad())) {
        out.push_back(*address);
      }
    }
    return out;
  }

  size_t size() const {
    return known_.size();
  }

 private:
  std::vector<WeakImpl> known_;
  std::unordered_map<c10::TensorImpl*, size_t> index_;
};

// The storage addresses of the openreg tensors among `objects` (any Python
// objects: others are skipped), in order.
std::vector<int64_t> storage_addresses(const py::iterable& objects) {
  std::vector<int64_t> out;
  for (py::handle obj : objects) {
    if (!THPVariable_Check(obj.ptr())) {
      continue;
    }
    if (auto address = device_storage_address(THPVariable_Unpack(obj.ptr()))) {
      out.push_back(*address);
    }
  }
  return out;
}

}  // namespace

void bind_param_watch(py::module_& m) {
  m.def("_storage_addresses", &storage_addresses, py::arg("objects"),
        "The storage addresses of the device tensors among `objects` (others skipped), in order");
  py::class_<ParamWatch>(m, "_ParamWatch",
                         "The parameters an open trace has seen, held weakly, and their gradients' "
                         "storage addresses (observations.py)")
      .def(py::init<>())
      .def("add", &ParamWatch::add, py::arg("params"),
           "The tensors of `params` not known yet, now known, in order")
      .def("grad_addresses", &ParamWatch::grad_addresses,
           "The storage addresses of the live known parameters' gradients on a device")
      .def("__len__", &ParamWatch::size);
}

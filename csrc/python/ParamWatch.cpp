// The parameters an open trace has seen, and where their gradients are
// (Note [Memory categories] in openreg_lab/recording/observations.py).
//
// Note [Gradients seen at each step]
// A training step ends with the gradients of every known parameter in fresh
// storages (zero_grad sets them to None, backward allocates them anew), so
// the trace notes their addresses at each step's end, and the state of its
// optimizers when it gained entries (made at the first step, updated in
// place after). That runs right after the step's kernels, when the
// interpreter's working set has left the caches: there a line of Python
// costs several times what it costs in a loop (an empty optimizer hook
// 2.4 us, three array.extend calls 14 us against 2.8 us warm), so no Python
// runs for it at all:
// - the recorder's step call (_C._trace_step, which steps.py makes at every
//   step's end) sweeps each open trace's ParamWatch here, in C++: each known
//   parameter is a weak reference to its TensorImpl (a model deleted inside
//   the trace is freed as it would be), whose gradient's storage address is
//   noted, and each optimizer seen is a weak reference whose state's length
//   is compared with the last sweep's;
// - the notes stay in flat vectors here until the trace's tables are first
//   read (notes());
// - the pre-step hook returns after one dict lookup for an optimizer every
//   open trace knows (every step but a trace's first).
// On benchmarks/bench_trace.py's MLP step (twenty steps a trace,
// ops="kernels") the Python sweep this replaced cost about 1.8% of the step
// (1.067x against 1.049x without it), and the step's end had gone from 45 to
// 29 us and the hook from 12 to 6 us before that.
#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>
#include <c10/util/intrusive_ptr.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/utils/pybind.h>

#include "python/ParamWatch.h"
#include "runtime/Clock.h"

#include <pybind11/pybind11.h>

#include <algorithm>
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

class ParamWatch;

// The watches of the open traces, swept at each step's end (under the GIL,
// as every call here is).
std::vector<ParamWatch*>& open_watches() {
  static std::vector<ParamWatch*> watches;
  return watches;
}

class ParamWatch {
 public:
  // `gradient` and `optimizer_state`: the category codes of the notes made
  // here (observations.py's GRADIENT and OPTIMIZER_STATE).
  ParamWatch(int8_t gradient, int8_t optimizer_state)
      : gradient_(gradient), optimizer_state_(optimizer_state) {}
  ~ParamWatch() {
    stop();
  }
  ParamWatch(const ParamWatch&) = delete;
  ParamWatch& operator=(const ParamWatch&) = delete;

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

  // Watch `optimizer` (held weakly) unless it is watched already: its state
  // is noted at the next sweep, and again whenever it has gained entries.
  // False if it was watched.
  bool add_optimizer(const py::handle& optimizer) {
    for (const Optimizer& o : optimizers_) {
      if (o.ref().is(optimizer)) {
        return false;
      }
    }
    optimizers_.push_back({py::weakref(optimizer), -1});
    return true;
  }

  // Notes, at `now`, the gradients' addresses and the state of each live
  // optimizer whose state's length changed since the last sweep.
  // (Reading an optimizer's state may run Python, a property's, and let another
  // thread add an optimizer here: the list is indexed afresh after each read.)
  void sweep(int64_t now) {
    note(now, gradient_, grad_addresses());
    for (size_t i = 0; i < optimizers_.size(); ++i) {
      py::object optimizer = optimizers_[i].ref();
      if (optimizer.is_none()) {
        continue;
      }
      py::object state = optimizer.attr("state");  // {param: {"exp_avg": tensor, ...}}
      const auto entries = static_cast<Py_ssize_t>(py::len(state));
      if (entries == optimizers_[i].seen) {
        continue;
      }
      optimizers_[i].seen = entries;
      std::vector<int64_t> found;
      for (py::handle per_param : state.attr("values")()) {
        append_addresses(per_param.attr("values")(), found);
      }
      note(now, optimizer_state_, found);
    }
  }

  // Swept at each step's end from now on (sweep_param_watches), until stop().
  void start() {
    if (std::find(open_watches().begin(), open_watches().end(), this) == open_watches().end()) {
      open_watches().push_back(this);
    }
  }
  void stop() {
    auto& watches = open_watches();
    watches.erase(std::remove(watches.begin(), watches.end(), this), watches.end());
  }

  // The notes so far: (times, categories, counts, addresses), the addresses
  // of note i being the counts[i] after those of the notes before it.
  py::tuple notes() const {
    return py::make_tuple(times_, categories_, counts_, addresses_);
  }

  // The storage addresses of the device tensors among `objects` (others
  // skipped), appended to `out` in order.
  static void append_addresses(const py::iterable& objects, std::vector<int64_t>& out) {
    for (py::handle obj : objects) {
      if (!THPVariable_Check(obj.ptr())) {
        continue;
      }
      if (auto address = device_storage_address(THPVariable_Unpack(obj.ptr()))) {
        out.push_back(*address);
      }
    }
  }

 private:
  struct Optimizer {
    py::weakref ref;
    Py_ssize_t seen;  // its state's length at the last sweep, -1 before the first
  };

  void note(int64_t now, int8_t category, const std::vector<int64_t>& found) {
    times_.push_back(now);
    categories_.push_back(category);
    counts_.push_back(static_cast<int64_t>(found.size()));
    addresses_.insert(addresses_.end(), found.begin(), found.end());
  }

  std::vector<WeakImpl> known_;
  std::unordered_map<c10::TensorImpl*, size_t> index_;
  std::vector<Optimizer> optimizers_;
  int8_t gradient_;
  int8_t optimizer_state_;
  std::vector<int64_t> times_;
  std::vector<int8_t> categories_;
  std::vector<int64_t> counts_;
  std::vector<int64_t> addresses_;
};

// The storage addresses of the openreg tensors among `objects` (any Python
// objects: others are skipped), in order.
std::vector<int64_t> storage_addresses(const py::iterable& objects) {
  std::vector<int64_t> out;
  ParamWatch::append_addresses(objects, out);
  return out;
}

}  // namespace

void sweep_param_watches() {
  if (open_watches().empty()) {
    return;
  }
  const int64_t now = openreg::now_ns();
  // Each held by its Python object while the sweeps run: a sweep may run Python
  // (above), and another thread may meanwhile close its trace and drop it.
  std::vector<py::object> watches;
  watches.reserve(open_watches().size());
  for (ParamWatch* w : open_watches()) {
    watches.push_back(py::cast(w, py::return_value_policy::reference));
  }
  for (const py::object& w : watches) {
    w.cast<ParamWatch&>().sweep(now);
  }
}

void bind_param_watch(py::module_& m) {
  m.def("_storage_addresses", &storage_addresses, py::arg("objects"),
        "The storage addresses of the device tensors among `objects` (others skipped), in order");
  py::class_<ParamWatch>(m, "_ParamWatch",
                         "The parameters and optimizers an open trace has seen, held weakly, and "
                         "the storages of their gradients and state noted at each step's end "
                         "(observations.py)")
      .def(py::init<int8_t, int8_t>(), py::arg("gradient"), py::arg("optimizer_state"))
      .def("add", &ParamWatch::add, py::arg("params"),
           "The tensors of `params` not known yet, now known, in order")
      .def("add_optimizer", &ParamWatch::add_optimizer, py::arg("optimizer"),
           "Note `optimizer`'s state at the next sweep, and whenever it gains entries; False if "
           "it was watched already")
      .def("grad_addresses", &ParamWatch::grad_addresses,
           "The storage addresses of the live known parameters' gradients on a device")
      .def("sweep", &ParamWatch::sweep, py::arg("now"),
           "Note the gradients, and the state of optimizers that gained entries, at `now`")
      .def("start", &ParamWatch::start, "Sweep at each step's end (_C._trace_step) from now on")
      .def("stop", &ParamWatch::stop, "Stop sweeping at each step's end")
      .def("notes", &ParamWatch::notes,
           "(times, categories, counts, addresses) of the notes so far, in order")
      .def("__len__", &ParamWatch::size);
}

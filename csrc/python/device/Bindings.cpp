// The device's Python face (the functions openreg_lab/device calls): thin by
// design, it converts arguments and forwards to runtime/ and aten/; it
// decides nothing. Both extensions bind it: the template's own (Module.cpp
// here) and the lab's (csrc/python/Module.cpp), which adds the lab's.

#include "python/device/Bindings.h"
#include "aten/Autocast.h"
#include "aten/Copy.h"
#include "aten/fallback/FallbackCount.h"
#include "aten/fallback/FallbackPolicy.h"
#include "aten/fallback/LayoutFallback.h"
#include "runtime/Device.h"
#include "runtime/DeviceAllocator.h"
#include "runtime/Generator.h"
#include "runtime/Stream.h"

#include <c10/core/Stream.h>
#include <c10/util/Exception.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/Generator.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace py = pybind11;

void bind_backend_meta(py::module_& m);   // BackendMeta.cpp
void bind_autograd_exit(py::module_& m);  // AutogradExit.cpp
void bind_distributed(py::module_& m);    // Distributed.cpp
void bind_sharing(py::module_& m);        // Sharing.cpp
void bind_memory(py::module_& m);         // Memory.cpp

namespace openreg::python {
namespace {

void init() {
  openreg::check_config();
  // Reading any limit parses OPENREG_MEMORY_LIMIT: a bad value fails the
  // import with a clear message rather than the first allocation.
  openreg::device_allocator().limit(0);
  openreg::fallback_policy();
  openreg::register_layout_fallbacks();
}

// A device index from Python, range-checked before it is narrowed to
// c10::DeviceIndex (int8): 257 must not become device 1, and 2**64 must get
// our invalid-device error, not pybind's "incompatible function arguments".
c10::DeviceIndex device_arg(const py::int_& d) {
  int overflow = 0;
  const long long v = PyLong_AsLongLongAndOverflow(d.ptr(), &overflow);
  const auto count = static_cast<long long>(openreg::device_count());
  if (overflow != 0 || v < 0 || v >= count) {
    openreg::throw_invalid_device(py::str(d).cast<std::string>());
  }
  return static_cast<c10::DeviceIndex>(v);
}

py::object default_generator(c10::DeviceIndex device) {
  return py::reinterpret_steal<py::object>(
      THPGenerator_initDefaultGenerator(openreg::default_generator(device)));
}

}  // namespace

void bind_device(py::module_& m) {
  m.def("_init", &init, "Validate the OPENREG_* environment variables.");

  m.def("device_count", [] { return static_cast<int>(openreg::device_count()); });
  m.def("current_device", [] { return static_cast<int>(openreg::current_device()); });
  m.def("set_device", [](const py::int_& d) { openreg::set_device(device_arg(d)); });
  m.def("exchange_device", [](const py::int_& d) {
    const c10::DeviceIndex index = d.cast<long long>() == -1 ? -1 : device_arg(d);
    return static_cast<int>(openreg::exchange_device(index));
  });
  m.def("check_device_index", [](const py::int_& d) { device_arg(d); });
  // Note [Lazy initialisation] in runtime/Device.h.
  m.def("mark_initialized", &openreg::mark_initialized);
  m.def("is_initialized", &openreg::is_initialized);

  m.def("set_memory_limit", [](const py::int_& d, std::optional<py::int_> nbytes) {
    const c10::DeviceIndex device = device_arg(d);
    std::optional<size_t> limit;
    if (nbytes.has_value()) {
      int overflow = 0;
      const long long n = PyLong_AsLongLongAndOverflow(nbytes->ptr(), &overflow);
      TORCH_CHECK_VALUE(overflow == 0 && n > 0,
                        "set_memory_limit: the limit must be a positive number of bytes up to "
                        "2**63 - 1, or None for no limit; got ",
                        py::str(*nbytes).cast<std::string>());
      limit = static_cast<size_t>(n);
    }
    openreg::device_allocator().set_limit(device, limit);
  });
  // Freeing a large cache takes time: other threads (and fork) need not wait for the GIL.
  m.def(
      "empty_cache", [] { openreg::device_allocator().emptyCache(); },
      py::call_guard<py::gil_scoped_release>(),
      "Return every cached block of every device to the host, without holding the GIL.");
  m.def(
      "_parse_memory_size",
      [](const std::string& text) -> std::optional<int64_t> {
        size_t nbytes = 0;
        if (!openreg::parse_bytes(text.c_str(), &nbytes)) {
          return std::nullopt;
        }
        return static_cast<int64_t>(nbytes);
      },
      "OPENREG_MEMORY_LIMIT's parser: the byte count `text` names, or None if it names none.");
  m.def("memory_limit", [](const py::int_& d) -> std::optional<int64_t> {
    auto limit = openreg::device_allocator().limit(device_arg(d));
    if (!limit.has_value()) {
      return std::nullopt;
    }
    return static_cast<int64_t>(*limit);
  });

  m.def("default_generator", [](const py::int_& d) { return default_generator(device_arg(d)); });

  m.def("stream_priority", [](int64_t stream_id, int d) {
    c10::Stream s(c10::Stream::UNSAFE,
                  c10::Device(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(d)),
                  stream_id);
    return openreg::stream_priority(s);
  });

  m.def("autocast_rules", [] {
    std::vector<std::pair<std::string, std::string>> out;
    for (const auto& rule : openreg::autocast_rules()) {
      out.emplace_back(rule.op, openreg::to_string(rule.policy));
    }
    return out;
  });
  m.def("cast_counts", [] {
    auto c = openreg::cast_counts_on_this_thread();
    return std::make_pair(c.casts, c.cache_hits);
  });

  m.def(
      "copies_on_this_thread", [] { return openreg::copies_on_this_thread(); },
      "Number of _copy_from calls (H2D, D2H, D2D transfers) made on this thread.");
  m.def(
      "fallbacks_on_this_thread", [] { return openreg::fallbacks_on_this_thread(); },
      "Number of calls that ran through the boxed CPU fallback on this thread.");

  m.def("fallback_policy", [] { return openreg::to_string(openreg::fallback_policy()); });
  m.def("set_fallback_policy", [](const std::string& name) {
    openreg::set_fallback_policy(openreg::parse_fallback_policy(name));
  });
  m.def("_set_policy_exempt", &openreg::set_policy_exempt, py::arg("exempt"),
        "Exempt this thread's fallback calls from the policy (Note [Printing is exempt from the "
        "fallback policy]); returns the previous setting.");

  bind_backend_meta(m);
  bind_autograd_exit(m);
  bind_distributed(m);
  bind_sharing(m);
  bind_memory(m);
}

}  // namespace openreg::python

// Bindings for the lab's coverage profiles (Note [Profiles]) and their
// per-thread count of generic native calls.

#include "coverage/GenericNative.h"
#include "coverage/Profile.h"

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <optional>
#include <string>
#include <vector>

namespace py = pybind11;

void bind_profiles(py::module_& m) {
  m.def(
      "set_profile",
      [](const std::string& name, std::vector<std::string> fallback,
         std::vector<std::string> composite, std::vector<std::string> generic,
         std::vector<std::string> covered) {
        openreg::set_profile(name, {std::move(fallback), std::move(composite), std::move(generic),
                                    std::move(covered)});
      },
      "Activate a profile: the hand-written ops to send to the fallback, those to send to their "
      "composite kernel, the ops to run through the generic native path, and every op the "
      "profile runs natively.");
  m.def("clear_profile", &openreg::clear_profile, "Back to openreg's own kernels.");
  m.def("profile_name", &openreg::profile_name, "Name of the active profile, or None.");
  m.def(
      "generic_calls_on_this_thread", [] { return openreg::generic_calls_on_this_thread(); },
      "Number of calls that ran through the generic native path on this thread.");
}

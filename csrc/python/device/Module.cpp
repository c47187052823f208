// The template's extension module: the device alone, without the lab
// (Note [One extension name, two builds] in openreg_lab/_extension.py). The
// lab's build leaves this file out (setup.py) and binds the same functions in
// its own module, csrc/python/Module.cpp.

#include "python/device/Bindings.h"

#include <pybind11/pybind11.h>

PYBIND11_MODULE(_C, m) {
  m.doc() = "C++ core of the openreg device (the template, without openreg-lab).";
  openreg::python::bind_device(m);
}

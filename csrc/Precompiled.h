// The headers nearly every translation unit parses, compiled once per build into a GCC precompiled
// header (setup.py passes it with -include). Parsing torch/library.h alone takes ~10 s per file;
// with the precompiled header it is read in well under a second. The bindings' headers (Python,
// pybind11 and torch's pybind glue, first, as Python.h asks) and ATen.h are in it too: they halve
// the CPU time of each file of csrc/python (22 s -> 10 s for AutogradExit.cpp, 26 s -> 13 s for
// Distributed.cpp) and cost the other files nothing measurable (Backend.cpp 13.8 s -> 13.0 s).
//
// Nothing may depend on this file: every source still includes what it uses, so the build also
// works without the precompiled header (setup.py falls back to that when it cannot make one).
#pragma once

#include <torch/csrc/utils/pybind.h>

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <c10/core/DeviceGuard.h>
#include <pybind11/stl.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

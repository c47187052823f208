// The headers nearly every translation unit parses, compiled once per build into a GCC precompiled
// header (setup.py passes it with -include). Parsing torch/library.h alone takes ~10 s per file;
// with the precompiled header it is read in well under a second.
//
// Nothing may depend on this file: every source still includes what it uses, so the build also
// works without the precompiled header (setup.py falls back to that when it cannot make one).
#pragma once

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <c10/core/DeviceGuard.h>
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

#pragma once

// Every native openreg kernel is registered through OPENREG_IMPL, never with
// a bare m.impl: this is the one place where instrumentation can wrap each
// native call. Each registered name must also be listed, under its family, in
// openreg_lab/native_ops.yaml (tests/test_native_ops.py checks both ways).

#include <torch/library.h>

#define OPENREG_IMPL(m, name, fn) (m).impl(name, TORCH_FN(fn))

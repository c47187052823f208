// For benchmarks/bench_memory.py only: torch's CapturedTraceback, what CUDA's
// memory history keeps for each entry, measured beside the interned stacks of
// Note [Interned stacks] (AllocStacks.cpp).

#include "trace/Clock.h"

#include <pybind11/pybind11.h>
#include <torch/csrc/profiler/combined_traceback.h>

#include <memory>
#include <vector>

namespace py = pybind11;

namespace torch {
// libtorch_python's (torch/csrc/profiler/python/combined_traceback.h, whose
// header needs nlohmann's JSON headers, which torch does not ship): the Python
// unwinder CapturedTraceback::gather uses.
void installCapturedTracebackPython();
}  // namespace torch

void bind_torch_tracebacks(py::module_& m) {
  // `n` gathers of the calling thread's Python frames from a thread that has
  // released the GIL (as an allocation's), then one symbolization of all of
  // them (what a snapshot does): the nanoseconds of each part.
  m.def(
      "_memory_bench_torch_tracebacks",
      [](int64_t n) {
        static const bool installed = [] {
          torch::installCapturedTracebackPython();
          return true;
        }();
        (void)installed;
        std::vector<std::shared_ptr<torch::CapturedTraceback>> kept;
        kept.reserve(static_cast<size_t>(n));
        int64_t gather_ns = 0;
        {
          py::gil_scoped_release no_gil;
          const int64_t start = openreg::trace::now_ns();
          for (int64_t i = 0; i < n; ++i) {
            kept.push_back(torch::CapturedTraceback::gather(true, false, false));
          }
          gather_ns = openreg::trace::now_ns() - start;
        }
        std::vector<torch::CapturedTraceback*> raw;
        raw.reserve(kept.size());
        for (const auto& t : kept) {
          raw.push_back(t.get());
        }
        const int64_t start = openreg::trace::now_ns();
        const torch::SymbolizedTracebacks symbolized = torch::symbolize(raw);
        const int64_t symbolize_ns = openreg::trace::now_ns() - start;
        TORCH_CHECK(symbolized.tracebacks.size() == raw.size());
        return py::make_tuple(gather_ns, symbolize_ns,
                              static_cast<int64_t>(symbolized.tracebacks.empty()
                                                       ? 0
                                                       : symbolized.tracebacks.back().size()));
      },
      py::arg("n"));
}

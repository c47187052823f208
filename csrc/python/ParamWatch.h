#pragma once

// Each open trace's parameters and optimizers (ParamWatch.cpp): their
// gradients' and state's storages are noted at every step's end (Note
// [Gradients seen at each step]).

// Sweeps every open trace's ParamWatch now; called with the GIL held by the
// recorder's step call (_C._trace_step), once the step's event is recorded.
void sweep_param_watches();

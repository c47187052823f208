#pragma once

// The CPU round trip for sparse, compressed sparse and quantized openreg
// tensors: Note [Sparse and quantized tensors through the fallback] in
// LayoutFallback.cpp.

namespace openreg {

// Registers the round trip over the composite kernels that would otherwise
// shadow it (see the note). Called once on import, after the static
// registrations; later calls do nothing.
void register_layout_fallbacks();

}  // namespace openreg

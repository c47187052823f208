#include "runtime/Seam.h"

namespace openreg::seam {

namespace detail {
std::atomic<const Hooks*> g_hooks{nullptr};
}  // namespace detail

void attach(const Hooks* table) noexcept {
  // Release: a thread that sees the pointer (relaxed, then dependent loads
  // through it) sees the table it points to; the table is filled before.
  detail::g_hooks.store(table, std::memory_order_release);
}

}  // namespace openreg::seam

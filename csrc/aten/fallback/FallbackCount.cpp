#include "aten/fallback/FallbackCount.h"

namespace openreg {
namespace {

thread_local uint64_t tls_fallbacks = 0;

}  // namespace

void count_fallback() noexcept {
  ++tls_fallbacks;
}

uint64_t fallbacks_on_this_thread() noexcept {
  return tls_fallbacks;
}

}  // namespace openreg

#include "trace/OpNames.h"

#include <string>
#include <unordered_map>

namespace openreg::trace {

uint32_t op_name_id(const c10::FunctionSchema& schema) {
  // A schema lives as long as its operator, so its name's address is a key.
  thread_local std::unordered_map<const void*, uint32_t> cache;
  auto [it, inserted] = cache.try_emplace(&schema.name(), 0);
  if (inserted) {
    std::string name = schema.name();
    if (!schema.overload_name().empty()) {
      name += "." + schema.overload_name();
    }
    it->second = intern(name);
  }
  return it->second;
}

}  // namespace openreg::trace

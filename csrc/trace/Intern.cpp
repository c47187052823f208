#include "trace/Intern.h"

#include <deque>
#include <mutex>
#include <unordered_map>

namespace openreg::trace {
namespace {

struct Table {
  std::mutex mutex;
  std::deque<std::string> strings{""};  // deque: views into it stay valid
  std::unordered_map<std::string_view, uint32_t> ids{{strings.front(), 0}};
};

Table& table() {
  static auto* t = new Table();  // leaked: used by threads until exit
  return *t;
}

}  // namespace

uint32_t intern(std::string_view text) {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mutex);
  auto it = t.ids.find(text);
  if (it != t.ids.end()) {
    return it->second;
  }
  const auto id = static_cast<uint32_t>(t.strings.size());
  t.strings.emplace_back(text);
  t.ids.emplace(t.strings.back(), id);
  return id;
}

std::vector<std::string> interned_strings(size_t first) {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mutex);
  if (first >= t.strings.size()) {
    return {};
  }
  return {t.strings.begin() + static_cast<std::ptrdiff_t>(first), t.strings.end()};
}

}  // namespace openreg::trace

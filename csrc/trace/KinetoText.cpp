#include "trace/KinetoText.h"

#include <cstdint>
#include <cstdio>

namespace openreg::trace {
namespace {

// The code point of the UTF-8 sequence at text[*i] (advancing *i past it),
// or -1 for a byte that starts no valid sequence (*i past that byte).
int32_t next_code_point(std::string_view text, size_t* i) {
  const auto byte = [&](size_t k) { return static_cast<uint8_t>(text[k]); };
  const uint8_t b = byte(*i);
  size_t length = 0;
  int32_t code = 0;
  if (b < 0x80) {
    ++*i;
    return b;
  } else if ((b & 0xE0) == 0xC0) {
    length = 2, code = b & 0x1F;
  } else if ((b & 0xF0) == 0xE0) {
    length = 3, code = b & 0x0F;
  } else if ((b & 0xF8) == 0xF0) {
    length = 4, code = b & 0x07;
  }
  if (length == 0 || *i + length > text.size()) {
    ++*i;
    return -1;
  }
  for (size_t k = 1; k < length; ++k) {
    if ((byte(*i + k) & 0xC0) != 0x80) {
      ++*i;
      return -1;
    }
    code = (code << 6) | (byte(*i + k) & 0x3F);
  }
  *i += length;
  return code;
}

}  // namespace

// Note [Text in Kineto's JSON]
// Kineto's JSON writer (libkineto's output_json.cpp) puts a name, and a quoted
// metadata value, between quotes as it is: it escapes nothing. It replaces a
// backslash with '/', drops newlines, and replaces a whole name in which a
// byte is not printable ASCII with "unknown". A '"' in a mark's name broke
// torch.profiler's whole file, and a name in Greek became "unknown". So every
// string openreg hands Kineto is printable ASCII first, as readable as it can
// stay: '"' becomes '\'', a backslash '/' (as Kineto would), any other
// character outside printable ASCII "<U+XXXX>" (its code point), and a byte
// that is not UTF-8 "<0xXX>".
std::string kineto_text(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    const size_t at = i;
    const int32_t c = next_code_point(text, &i);
    char escape[16];
    if (c == '"') {
      out += '\'';
    } else if (c == '\\') {
      out += '/';
    } else if (c >= 0x20 && c < 0x7F) {
      out += static_cast<char>(c);
    } else if (c < 0) {
      std::snprintf(escape, sizeof(escape), "<0x%02X>", static_cast<uint8_t>(text[at]));
      out += escape;
    } else {
      std::snprintf(escape, sizeof(escape), "<U+%04X>", static_cast<unsigned>(c));
      out += escape;
    }
  }
  return out;
}

}  // namespace openreg::trace

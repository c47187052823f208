#pragma once

// Note [Strings the recorder keeps]
// The recorder's string table (trace/Intern.h) holds bytes. Python text is
// not always UTF-8: a file name whose bytes are not UTF-8 reaches Python with
// each such byte as a lone surrogate ("caf\udce9", the surrogateescape
// handler), and a mark or a compiler message may hold any lone surrogate.
// Strict UTF-8 cannot encode those, so a frame in such a file was taken for
// library code and its line lost. Text crosses between Python and the table
// with the "surrogatepass" handler both ways: valid text is plain UTF-8, and a
// lone surrogate is kept as its three-byte form and comes back as itself. The
// trace file's header keeps them the same way (Note [Header text] in
// openreg_lab/recording/files.py), and the views show them escaped
// (openreg_lab/recording/text.py).

#include <pybind11/pybind11.h>

#include <string>
#include <vector>

namespace openreg::python {

// The bytes of `text` (a str) for the string table; false if it is not a str.
bool table_bytes(PyObject* text, std::string* out);

// The strings of the table as a list of str (the inverse of table_bytes).
pybind11::list table_strings(const std::vector<std::string>& strings);

}  // namespace openreg::python

// Python text in the recorder's string table: Note [Strings the recorder keeps].

#include "python/Text.h"

namespace py = pybind11;

namespace openreg::python {

bool table_bytes(PyObject* text, std::string* out) {
  if (!PyUnicode_Check(text)) {
    return false;
  }
  Py_ssize_t size = 0;
  if (const char* utf8 = PyUnicode_AsUTF8AndSize(text, &size)) {
    out->assign(utf8, static_cast<size_t>(size));
    return true;
  }
  PyErr_Clear();  // a lone surrogate: strict UTF-8 cannot hold it
  PyObject* bytes = PyUnicode_AsEncodedString(text, "utf-8", "surrogatepass");
  if (bytes == nullptr) {
    PyErr_Clear();
    return false;
  }
  out->assign(PyBytes_AS_STRING(bytes), static_cast<size_t>(PyBytes_GET_SIZE(bytes)));
  Py_DECREF(bytes);
  return true;
}

py::list table_strings(const std::vector<std::string>& strings) {
  py::list out(strings.size());
  for (size_t i = 0; i < strings.size(); ++i) {
    const std::string& s = strings[i];
    PyObject* text =
        PyUnicode_DecodeUTF8(s.data(), static_cast<Py_ssize_t>(s.size()), "surrogatepass");
    if (text == nullptr) {
      throw py::error_already_set();
    }
    PyList_SET_ITEM(out.ptr(), static_cast<Py_ssize_t>(i), text);
  }
  return out;
}

}  // namespace openreg::python

/* hwadapter-paddle: the pending Python exception as text ("TypeName: message"), cleared; for the libraries that call
 * hwadapter_paddle under the GIL (the Python-kernel library, the collectives library). */
#pragma once
#include <Python.h>

#include <string>

namespace hwa_pd {

/* Call under the GIL after a failed call; `missing` stands for an exception without a message. */
inline std::string python_error(const char *missing) {
  PyObject *type, *value, *trace;
  PyErr_Fetch(&type, &value, &trace);
  PyObject *text = value ? PyObject_Str(value) : nullptr;
  const char *c = text ? PyUnicode_AsUTF8(text) : nullptr;
  std::string said = std::string(type ? ((PyTypeObject *)type)->tp_name : "error") + ": " + (c ? c : missing);
  PyErr_Clear();
  Py_XDECREF(text);
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(trace);
  return said;
}

}  // namespace hwa_pd

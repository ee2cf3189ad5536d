// SPDX-License-Identifier: Apache-2.0
// The exception hierarchy: chimera.Error (a RuntimeError) and one subclass per StatusCode,
// each also deriving from the builtin exception Python code would catch for it
// (InvalidArgument is a ValueError, Unsupported a NotImplementedError, Timeout a TimeoutError).
#include "errors.hpp"

#include <array>

#include "bindings.hpp"

namespace chimera::python {
namespace {

// Indexed by StatusCode; [Ok] holds the base class chimera.Error.
std::array<PyObject*, 7> gExceptions{};

PyObject* makeException(nb::module_& m, const char* name, PyObject* base, PyObject* builtin, const char* doc) {
  const std::string qualified = std::string("chimera.") + name;
  nb::object bases = builtin != nullptr ? nb::steal(PyTuple_Pack(2, base, builtin)) : nb::steal(PyTuple_Pack(1, base));
  PyObject* type = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, bases.ptr(), nullptr);
  if (type == nullptr) throw nb::python_error();
  m.attr(name) = nb::handle(type);
  return type;
}

}  // namespace

void raiseStatus(const Status& status) {
  PyObject* type = gExceptions[static_cast<std::size_t>(status.code())];
  if (type == nullptr) type = gExceptions[0];
  PyErr_SetString(type, status.message().c_str());
  throw nb::python_error();
}

void raiseValueError(const std::string& message) {
  PyErr_SetString(PyExc_ValueError, message.c_str());
  throw nb::python_error();
}

void bindErrors(nb::module_& m) {
  // A Python value nanobind cannot convert inside a binding (e.g. a negative byte count) is the
  // caller's type error, not an opaque "std::bad_cast".
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const nb::cast_error&) {
      PyErr_SetString(PyExc_TypeError, "chimera: an argument has the wrong type or is out of range for it");
    }
  });
  PyObject* base =
      makeException(m, "Error", PyExc_RuntimeError, nullptr, "Base of every error chimera reports (a failed Status).");
  gExceptions[0] = base;
  gExceptions[static_cast<std::size_t>(StatusCode::InvalidArgument)] =
      makeException(m, "InvalidArgument", base, PyExc_ValueError, "The caller passed something malformed.");
  gExceptions[static_cast<std::size_t>(StatusCode::Unsupported)] = makeException(
      m, "Unsupported", base, PyExc_NotImplementedError, "Well-formed but not supported here (callers may fall back).");
  gExceptions[static_cast<std::size_t>(StatusCode::Mismatch)] =
      makeException(m, "Mismatch", base, nullptr, "Ranks disagree (counts, plans, signatures); raised on every rank.");
  gExceptions[static_cast<std::size_t>(StatusCode::BackendError)] =
      makeException(m, "BackendError", base, nullptr, "The transport (MPI, NCCL, CUDA) reported a failure.");
  gExceptions[static_cast<std::size_t>(StatusCode::Timeout)] =
      makeException(m, "Timeout", base, PyExc_TimeoutError, "An operation stopped making progress and was aborted.");
  gExceptions[static_cast<std::size_t>(StatusCode::Internal)] =
      makeException(m, "Internal", base, nullptr, "A bug in chimera; please report it.");
  m.def(
      "_error_type",
      [](int code) {
        const bool known = code > 0 && code < static_cast<int>(gExceptions.size());
        return nb::borrow(known ? gExceptions[static_cast<std::size_t>(code)] : gExceptions[0]);
      },
      nb::arg("code"),
      "The exception class of a StatusCode value (chimera.Error for an unknown one): how chimera.torch._C raises "
      "errors of this hierarchy.");
}

}  // namespace chimera::python

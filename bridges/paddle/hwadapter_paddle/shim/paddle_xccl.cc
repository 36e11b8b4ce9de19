/* hwadapter-paddle: Paddle's collectives (xccl_*) for a device type whose library brings no communicator.
 *
 * libhwadapter_paddle_<type>.xccl, beside the runtime shim, which loads it in a process that runs Python when the
 * device library has no communication functions of its own (device_api.h 1.2). It exports one table in the shape
 * of device_api.h's communication functions (hwadapter_paddle_xccl_interface); each takes the GIL and calls
 * hwadapter_paddle.xccl, which runs the call on hwadapter's communicator for the device (the plugin's own, else the
 * default one on MPI). The runtime shim has completed the call's stream first; each call here completes before it
 * returns. Compiled by `hwadapter paddle install` against Python's and hwadapter's headers only (no libpaddle):
 *   -DHWA_PD_HWA_TYPE="cpu"     the hwadapter device type
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h> /* first, as Python asks */

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mutex>
#include <string>
#include <vector>

#include "hwadapter/device_api.h"
#include "python_error.h"

#ifndef HWA_PD_HWA_TYPE
#error "define HWA_PD_HWA_TYPE (the hwadapter device type, a string)"
#endif

namespace {

thread_local std::string t_error;

/* A thread Python does not know (one of Paddle's) keeps the thread state it is given on its first call: making and
 * deleting one per call costs microseconds each time (shim/paddle_kernels.cc does the same for its kernels). */
void keep_thread_state() {
  static thread_local bool checked = false;
  if (checked) return;
  checked = true;
  if (PyGILState_GetThisThreadState()) return;
  PyGILState_Ensure();
  PyEval_SaveThread(); /* leaked on purpose: Paddle's threads may end after the interpreter */
}

bool finished() {
#if PY_VERSION_HEX >= 0x030D0000
  return !Py_IsInitialized() || Py_IsFinalizing();
#else
  return !Py_IsInitialized() || _Py_IsFinalizing();
#endif
}

/* hwadapter_paddle.xccl.<name>(*args) under the GIL; its result as an integer in *out. On an exception: its type
 * and text in t_error, and HWA_ERROR (HWA_INVALID_ARGUMENT for ValueError, HWA_UNSUPPORTED for NotImplementedError,
 * so the shim's message says which). */
int call(const char *name, PyObject *args, long long *out = nullptr) {
  static PyObject *module = nullptr; /* imported once, under the GIL */
  int rc = HWA_OK;
  if (!module) module = PyImport_ImportModule("hwadapter_paddle.xccl");
  PyObject *fn = module && args ? PyObject_GetAttrString(module, name) : nullptr;
  PyObject *result = fn ? PyObject_CallObject(fn, args) : nullptr;
  if (result && out) *out = PyLong_AsLongLong(result);
  if (!result || PyErr_Occurred()) {
    bool invalid = PyErr_ExceptionMatches(PyExc_ValueError);
    bool unsupported = PyErr_ExceptionMatches(PyExc_NotImplementedError);
    t_error = hwa_pd::python_error("?");
    rc = invalid ? HWA_INVALID_ARGUMENT : unsupported ? HWA_UNSUPPORTED : HWA_ERROR;
  }
  Py_XDECREF(result);
  Py_XDECREF(fn);
  Py_XDECREF(args);
  return rc;
}

/* Builds the arguments and calls, holding the GIL. */
template <typename... A>
int python(const char *name, long long *out, const char *format, A... args) {
  if (finished()) { /* Paddle destroys its communicators at exit, after Python's end: nothing left to free */
    t_error = "Python has finished";
    return strcmp(name, "destroy") == 0 ? HWA_OK : HWA_ERROR;
  }
  keep_thread_state();
  PyGILState_STATE gil = PyGILState_Ensure();
  int rc = call(name, Py_BuildValue(format, args...), out);
  PyGILState_Release(gil);
  return rc;
}

#define ADDR(p) ((unsigned long long)(uintptr_t)(p))
#define HANDLE(c) ((long long)(intptr_t)(c))

int unique_id_size(size_t *size) {
  long long n = 0;
  int rc = python("unique_id_size", &n, "()");
  if (rc == HWA_OK) *size = (size_t)n;
  return rc;
}
int unique_id(void *id, size_t size) {
  /* the id is written into `id` by Python (a writable memoryview over it) */
  keep_thread_state();
  PyGILState_STATE gil = PyGILState_Ensure();
  PyObject *view = PyMemoryView_FromMemory((char *)id, (Py_ssize_t)size, PyBUF_WRITE);
  int rc = call("unique_id", Py_BuildValue("(sN)", HWA_PD_HWA_TYPE, view));
  PyGILState_Release(gil);
  return rc;
}
int init_rank(int device, const void *id, size_t size, int nranks, int rank, HwaComm *comm) {
  long long handle = 0;
  int rc = python("init_rank", &handle, "(siy#ii)", HWA_PD_HWA_TYPE, device, (const char *)id, (Py_ssize_t)size,
                  nranks, rank);
  if (rc == HWA_OK) *comm = (HwaComm)(intptr_t)handle;
  return rc;
}
int destroy(HwaComm comm) { return python("destroy", nullptr, "(L)", HANDLE(comm)); }
int all_reduce(const void *send, void *recv, size_t count, HwaDType dtype, HwaReduceOp op, HwaComm comm, HwaStream) {
  return python("all_reduce", nullptr, "(LKKKii)", HANDLE(comm), ADDR(send), ADDR(recv), (unsigned long long)count,
                (int)dtype, (int)op);
}
int broadcast(void *buf, size_t count, HwaDType dtype, int root, HwaComm comm, HwaStream) {
  return python("broadcast", nullptr, "(LKKii)", HANDLE(comm), ADDR(buf), (unsigned long long)count, (int)dtype, root);
}
int reduce(const void *send, void *recv, size_t count, HwaDType dtype, HwaReduceOp op, int root, HwaComm comm,
           HwaStream) {
  return python("reduce", nullptr, "(LKKKiii)", HANDLE(comm), ADDR(send), ADDR(recv), (unsigned long long)count,
                (int)dtype, (int)op, root);
}
int all_gather(const void *send, void *recv, size_t count, HwaDType dtype, HwaComm comm, HwaStream) {
  return python("all_gather", nullptr, "(LKKKi)", HANDLE(comm), ADDR(send), ADDR(recv), (unsigned long long)count,
                (int)dtype);
}
int reduce_scatter(const void *send, void *recv, size_t count, HwaDType dtype, HwaReduceOp op, HwaComm comm,
                   HwaStream) {
  return python("reduce_scatter", nullptr, "(LKKKii)", HANDLE(comm), ADDR(send), ADDR(recv),
                (unsigned long long)count, (int)dtype, (int)op);
}
int all_to_all(const void *send, void *recv, size_t count, HwaDType dtype, HwaComm comm, HwaStream) {
  return python("all_to_all", nullptr, "(LKKKi)", HANDLE(comm), ADDR(send), ADDR(recv), (unsigned long long)count,
                (int)dtype);
}
int send(const void *buf, size_t count, HwaDType dtype, int peer, HwaComm comm, HwaStream) {
  return python("send", nullptr, "(LKKii)", HANDLE(comm), ADDR(buf), (unsigned long long)count, (int)dtype, peer);
}
int recv(void *buf, size_t count, HwaDType dtype, int peer, HwaComm comm, HwaStream) {
  return python("recv", nullptr, "(LKKii)", HANDLE(comm), ADDR(buf), (unsigned long long)count, (int)dtype, peer);
}
int group_start(void) { return python("group_start", nullptr, "()"); }
int group_end(void) { return python("group_end", nullptr, "()"); }
const char *last_error(void) { return t_error.c_str(); }

HwaDeviceInterface make_table() {
  HwaDeviceInterface t;
  memset(&t, 0, sizeof t);
  t.struct_size = sizeof t;
  t.api_major = HWA_API_MAJOR;
  t.api_minor = HWA_API_MINOR;
  t.last_error = last_error;
  t.comm_unique_id_size = unique_id_size;
  t.comm_unique_id = unique_id;
  t.comm_init_rank = init_rank;
  t.comm_destroy = destroy;
  t.all_reduce = all_reduce;
  t.broadcast = broadcast;
  t.reduce = reduce;
  t.all_gather = all_gather;
  t.reduce_scatter = reduce_scatter;
  t.all_to_all = all_to_all;
  t.send = send;
  t.recv = recv;
  t.group_start = group_start;
  t.group_end = group_end;
  return t;
}

}  // namespace

/* The communication functions (and last_error) of a device_api.h table; every other field is empty. Called by the
 * runtime shim in InitPlugin, at `import paddle`: a rank of `hwadapter paddle launch` (HWADAPTER_PADDLE_MPI=1) joins
 * its MPI job there, so that a rank that dies before its first collective is seen by mpiexec, which stops the job,
 * instead of leaving the others waiting for it to join. */
extern "C" __attribute__((visibility("default"))) const HwaDeviceInterface *hwadapter_paddle_xccl_interface(void) {
  static const HwaDeviceInterface table = make_table();
  const char *job = getenv("HWADAPTER_PADDLE_MPI");
  if (job && strcmp(job, "1") == 0 && python("join", nullptr, "(s)", HWA_PD_HWA_TYPE) != HWA_OK) {
    fprintf(stderr, "hwadapter-paddle: %s: joining the MPI job failed: %s\n", HWA_PD_HWA_TYPE, t_error.c_str());
    fflush(stderr);
  }
  return &table;
}

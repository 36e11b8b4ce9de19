/* One call from Python into the tuned kernels' C (calls.py): a CPython function, so that a kernel's pointers are read
 * and its entry point called in C. Through ctypes, a convolution's Python side took more time than a small
 * convolution (each .ctypes.data and libffi call walks much Python; in a model, after a large kernel has flushed the
 * caches, the walk is several times slower again). Compiled after "#include <Python.h>" with the running Python's
 * headers (calls.py puts it first). */
#include <stdint.h>
#include <string.h>

/* An entry point taking (a0, a1, parameters, a3, a4): tasks.c's hwa_phase(crew, kind, p, ranges, count) and crew.c's
 * hwa_crew_call(crew, task, p, ranges, count); nonzero: it failed. */
typedef int64_t (*hwa_entry)(int64_t a0, int64_t a1, int64_t *params, int64_t a3, int64_t a4);

#define CALL_SLOTS 64 /* parameters a call may have: tasks.c's slots, pool.c's */
#define CALL_ARRAYS 8 /* arrays a call may point to */

/* call(entry, a0, a1, template, a3, a4, images, slot, array, step, ...) -> the entry's last result. The parameters
 * are a copy of `template` (an int64 buffer) with parameter `slot` pointing at each `array` (C-contiguous; None: 0),
 * moved by `step` bytes for each image in turn: the entry runs once per image, and stops at the first failure. The
 * GIL is released while it runs. */
static PyObject *call(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  (void)self;
  if (nargs < 7 || (nargs - 7) % 3 || (nargs - 7) / 3 > CALL_ARRAYS) {
    PyErr_SetString(PyExc_TypeError, "call(entry, a0, a1, template, a3, a4, images, [slot, array, step]...)");
    return NULL;
  }
  int64_t head[6];
  const int at[6] = {0, 1, 2, 4, 5, 6};
  for (int i = 0; i < 6; i++) {
    head[i] = PyLong_AsLongLong(args[at[i]]);
    if (head[i] == -1 && PyErr_Occurred()) return NULL;
  }
  Py_buffer tv;
  if (PyObject_GetBuffer(args[3], &tv, PyBUF_SIMPLE) < 0) return NULL;
  int64_t params[CALL_SLOTS];
  Py_ssize_t slots = tv.len / (Py_ssize_t)sizeof(int64_t);
  if (slots > CALL_SLOTS) {
    PyBuffer_Release(&tv);
    PyErr_SetString(PyExc_ValueError, "call: more parameters than CALL_SLOTS");
    return NULL;
  }
  memcpy(params, tv.buf, (size_t)slots * sizeof(int64_t));
  PyBuffer_Release(&tv);
  Py_buffer views[CALL_ARRAYS];
  int64_t slot[CALL_ARRAYS], base[CALL_ARRAYS], step[CALL_ARRAYS];
  int held = 0, arrays = (int)((nargs - 7) / 3);
  PyObject *result = NULL;
  for (int i = 0; i < arrays; i++) {
    PyObject *const *t = args + 7 + 3 * i;
    slot[i] = PyLong_AsLongLong(t[0]);
    step[i] = PyLong_AsLongLong(t[2]);
    if (PyErr_Occurred()) goto done;
    if (slot[i] < 0 || slot[i] >= slots) {
      PyErr_SetString(PyExc_ValueError, "call: a parameter slot outside the template");
      goto done;
    }
    base[i] = 0;
    if (t[1] != Py_None) {
      if (PyObject_GetBuffer(t[1], &views[held], PyBUF_SIMPLE) < 0) goto done;  /* C-contiguous only */
      base[i] = (int64_t)(intptr_t)views[held++].buf;
    }
  }
  hwa_entry entry = (hwa_entry)(intptr_t)head[0];
  int64_t r = 0;
  Py_BEGIN_ALLOW_THREADS
  for (int64_t image = 0; image < head[5] && r == 0; image++) {
    for (int i = 0; i < arrays; i++) params[slot[i]] = base[i] ? base[i] + image * step[i] : 0;
    r = entry(head[1], head[2], params, head[3], head[4]);
  }
  Py_END_ALLOW_THREADS
  result = PyLong_FromLongLong(r);
done:
  for (int i = 0; i < held; i++) PyBuffer_Release(&views[i]);
  return result;
}

/* A segment's program (segments.py), an int64 array: its record count, then each record: entry, a0, a1, a3, a4,
 * images, parameter count, patch count, the parameters, then per patch its slot, kind, value and step. A patch points
 * its slot at the arena plus `value` bytes (ARENA), at input `value` (INPUT), at address `value` (POINTER: a constant
 * the program keeps), at a failure flag the record's entry sets (FLAG), or at nothing (NONE). */
enum { ARENA, INPUT, POINTER, FLAG, NONE };
#define RUN_INPUTS 64

/* run(program, arena, inputs) -> 0, or 1 + the number of the record that failed: every record in order, the GIL
 * released throughout. */
static PyObject *run(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  (void)self;
  if (nargs != 3 || !PyTuple_Check(args[2]) || PyTuple_GET_SIZE(args[2]) > RUN_INPUTS) {
    PyErr_SetString(PyExc_TypeError, "run(program, arena, inputs: a tuple of at most 64 arrays)");
    return NULL;
  }
  Py_buffer pv, av, iv[RUN_INPUTS];
  int64_t ins[RUN_INPUTS];
  int held = 0;
  Py_ssize_t n = PyTuple_GET_SIZE(args[2]);
  if (PyObject_GetBuffer(args[0], &pv, PyBUF_SIMPLE) < 0) return NULL;
  if (PyObject_GetBuffer(args[1], &av, PyBUF_WRITABLE) < 0) {
    PyBuffer_Release(&pv);
    return NULL;
  }
  PyObject *result = NULL;
  for (Py_ssize_t i = 0; i < n; i++) {
    if (PyObject_GetBuffer(PyTuple_GET_ITEM(args[2], i), &iv[held], PyBUF_SIMPLE) < 0) goto done;
    ins[i] = (int64_t)(intptr_t)iv[held++].buf;
  }
  const int64_t *q = pv.buf, *end = q + pv.len / (Py_ssize_t)sizeof(int64_t);
  int64_t arena = (int64_t)(intptr_t)av.buf, failed = 0, records = q < end ? *q++ : 0;
  Py_BEGIN_ALLOW_THREADS
  for (int64_t r = 0; r < records && !failed; r++) {
    int64_t params[CALL_SLOTS], flag = 0;
    hwa_entry entry = (hwa_entry)(intptr_t)q[0];
    int64_t a0 = q[1], a1 = q[2], a3 = q[3], a4 = q[4], images = q[5], count = q[6], patches = q[7];
    memcpy(params, q + 8, (size_t)count * sizeof(int64_t));
    const int64_t *pt = q + 8 + count;
    q = pt + 4 * patches;
    for (int64_t image = 0; image < images && !failed; image++) {
      for (int64_t k = 0; k < patches; k++) {
        int64_t slot = pt[4 * k], kind = pt[4 * k + 1], value = pt[4 * k + 2], step = pt[4 * k + 3];
        int64_t base = kind == ARENA ? arena + value : kind == INPUT ? ins[value] : kind == POINTER ? value
                     : kind == FLAG ? (int64_t)(intptr_t)&flag : 0;
        params[slot] = base && kind != FLAG ? base + image * step : base;
      }
      if (entry(a0, a1, params, a3, a4) || flag) failed = r + 1;
    }
  }
  Py_END_ALLOW_THREADS
  result = PyLong_FromLongLong(failed);
done:
  for (int i = 0; i < held; i++) PyBuffer_Release(&iv[i]);
  PyBuffer_Release(&av);
  PyBuffer_Release(&pv);
  return result;
}

static PyMethodDef call_def = {"call", (PyCFunction)(void (*)(void))call, METH_FASTCALL,
                               "call(entry, a0, a1, template, a3, a4, images, [slot, array, step]...)"};
static PyMethodDef run_def = {"run", (PyCFunction)(void (*)(void))run, METH_FASTCALL,
                              "run(program, arena, inputs) -> 0 or 1 + the failed record"};

/* The function objects (call, run), made once by calls.py (through ctypes, holding the GIL). */
PyObject *hwa_calls(void) {
  return Py_BuildValue("(NN)", PyCFunction_NewEx(&call_def, NULL, NULL), PyCFunction_NewEx(&run_def, NULL, NULL));
}

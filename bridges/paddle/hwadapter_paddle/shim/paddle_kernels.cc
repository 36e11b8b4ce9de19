/* hwadapter-paddle: phi kernels for one hwadapter device type, calling its device library's C kernels.
 *
 * The second library beside the runtime shim (libhwadapter_paddle_<type>.kernels, not *.so: Paddle does not load it
 * itself). The runtime shim loads it at the end of a successful InitPlugin; its static registrars
 * (PD_REGISTER_PLUGIN_KERNEL) then add phi kernels for the device type. Each kernel allocates its output with Paddle's allocator (the runtime shim's, i.e. the library's memory),
 * describes the tensors as HwaTensors and calls the library's HwaKernelFn: no Python, no GIL, no copies.
 *
 * Which phi kernels, for which dtypes, comes from hwadapter_paddle/optable.py and the library's own kernel table:
 * `hwadapter paddle install` writes hwa_kernels.inc (the registrations) and compiles this file with
 *   -std=c++17 -D_GLIBCXX_USE_CXX11_ABI=1 -DPADDLE_WITH_CUSTOM_DEVICE -DPADDLE_WITH_CUSTOM_KERNEL
 *   -DHWA_PD_DEVICE_TYPE="cdemo" -DHWA_PD_TYPE_TOKEN=cdemo -DHWA_PD_LIBRARY="/path/lib.so" -DHWA_PD_BUILT_FOR="..."
 * linked to <paddle>/base/libpaddle.so. `contiguous` (strided views) is registered for every dtype here, built on
 * the library's copies alone. Phi kernels with attributes (reductions, softmax, conv2d, pool2d, clip, cumsum, ...)
 * go through helpers here that turn Paddle's arguments into hwadapter's attributes and refuse, naming why, the
 * calls they cannot pass.
 *
 * Built with -DHWA_PD_PYTHON -DHWA_PD_HWA_TYPE="cpu" (and Python's include folder) it is the Python-kernel library
 * instead, libhwadapter_paddle_<type>.pykernels, for a plugin whose kernels are Python and whose memory the host
 * addresses: each kernel allocates its output first (no GIL held while Paddle's allocator runs), then takes the GIL
 * and calls hwadapter_paddle.pykernels.run, which runs the plugin's kernel on numpy views of the device memory.
 * No contiguous there (the C kernels library has it). The runtime shim loads it only when the process runs Python.
 */
#ifdef HWA_PD_PYTHON
#include <Python.h> /* first, as Python asks */

#include "python_error.h"
#endif
#include <dlfcn.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

#include "hwadapter/device_api.h"
#include "paddle/phi/backends/custom/custom_context.h"
#include "paddle/phi/common/int_array.h"
#include "paddle/phi/common/scalar.h"
#include "paddle/phi/core/dense_tensor.h"
#include "paddle/phi/core/kernel_registry.h"
#ifndef HWA_PD_PYTHON
#include <random>

#include "paddle/phi/core/generator.h"
#include "paddle/phi/kernels/funcs/uniform_real_distribution.h"
#endif

#ifndef HWA_PD_DEVICE_TYPE
#error "define HWA_PD_DEVICE_TYPE (the device type's name, a string) and HWA_PD_TYPE_TOKEN (the same, a token)"
#endif
#ifndef HWA_PD_LIBRARY
#error "define HWA_PD_LIBRARY (the hwadapter device library's path, a string)"
#endif
#ifndef HWA_PD_BUILT_FOR
#define HWA_PD_BUILT_FOR "an unknown paddlepaddle"
#endif

namespace hwa_pd {

/* The HwaDType of a Paddle dtype (Paddle's C_DataType numbering), -1 for one device_api.h has no code for. */
int32_t any_code(phi::DataType d) {
  switch (d) {
    case phi::DataType::BOOL: return HWA_BOOL;
    case phi::DataType::UINT8: return HWA_UINT8;
    case phi::DataType::INT8: return HWA_INT8;
    case phi::DataType::INT16: return HWA_INT16;
    case phi::DataType::INT32: return HWA_INT32;
    case phi::DataType::INT64: return HWA_INT64;
    case phi::DataType::FLOAT16: return HWA_FLOAT16;
    case phi::DataType::FLOAT32: return HWA_FLOAT32;
    case phi::DataType::FLOAT64: return HWA_FLOAT64;
    default: return -1;
  }
}

/* ---- the device library, loaded on the first kernel call (the runtime shim has initialised it) ---- */
HwaDeviceInterface g_api;
std::string g_load_error;
std::once_flag g_once;

const HwaDeviceInterface &api() {
  std::call_once(g_once, [] {
    /* The same path as the runtime shim's dlopen: the same library instance, already initialised. */
    void *handle = dlopen(HWA_PD_LIBRARY, RTLD_NOW | RTLD_LOCAL);
    auto get = handle ? (HwaGetDeviceInterfaceFn)dlsym(handle, HWA_GET_DEVICE_INTERFACE) : nullptr;
    const HwaDeviceInterface *t = get ? get() : nullptr;
    if (!t || t->api_major != HWA_API_MAJOR || t->api_minor > HWA_API_MINOR) {
      const char *err = dlerror();
      g_load_error = std::string("cannot use its device library ") + HWA_PD_LIBRARY + " (" +
                     (err ? err : "no usable hwadapter_get_device_interface") + ")";
      return;
    }
    memset(&g_api, 0, sizeof g_api);
    memcpy(&g_api, t, t->struct_size < sizeof g_api ? t->struct_size : sizeof g_api);
  });
  if (!g_load_error.empty())
    PADDLE_THROW(common::errors::Unavailable("hwadapter-paddle: %s: %s; reinstall the plugin, then run `hwadapter "
                                             "paddle install %s`", HWA_PD_DEVICE_TYPE, g_load_error.c_str(),
                                             HWA_PD_DEVICE_TYPE));
  return g_api;
}

std::string library_message() {
  const char *msg = g_api.last_error ? g_api.last_error() : nullptr;
  return msg && *msg ? std::string(": ") + msg : std::string();
}

const char *status_name(int status) {
  switch (status) {
    case HWA_OUT_OF_MEMORY: return "HWA_OUT_OF_MEMORY";
    case HWA_INVALID_ARGUMENT: return "HWA_INVALID_ARGUMENT";
    case HWA_UNSUPPORTED: return "HWA_UNSUPPORTED";
    default: return "HWA_ERROR";
  }
}

#ifdef HWA_PD_PYTHON
int python_kernel(int, HwaStream, const HwaTensor *, size_t, HwaTensor *, size_t, const HwaAttr *, size_t) {
  return HWA_UNSUPPORTED;  /* a marker: launch calls the plugin's Python kernel by the op's name */
}
HwaKernelFn find_kernel(const char *, std::initializer_list<int32_t>) { return python_kernel; }

/* (memoryview over the tensor's span of host-addressable device memory, or None when empty; shape; strides in
 * elements; dtype code) */
PyObject *tensor_tuple(const HwaTensor &t, size_t itemsize) {
  PyObject *shape = PyTuple_New(t.ndim), *strides = PyTuple_New(t.ndim);
  int64_t span = 1;
  for (int d = 0; d < t.ndim; ++d) {
    PyTuple_SET_ITEM(shape, d, PyLong_FromLongLong(t.shape[d]));
    PyTuple_SET_ITEM(strides, d, PyLong_FromLongLong(t.strides[d]));
    span += (t.shape[d] - 1) * t.strides[d];
  }
  PyObject *memory = t.data ? PyMemoryView_FromMemory((char *)t.data, (Py_ssize_t)(span * itemsize), PyBUF_WRITE)
                            : Py_NewRef(Py_None);
  return Py_BuildValue("(NNNi)", memory, shape, strides, (int)t.dtype);
}

size_t itemsize(int32_t code) {
  switch (code) {
    case HWA_BOOL: case HWA_UINT8: case HWA_INT8: return 1;
    case HWA_INT16: case HWA_FLOAT16: return 2;
    case HWA_INT32: case HWA_FLOAT32: return 4;
    default: return 8;
  }
}

/* Under to_static, Paddle's executor runs kernels on its own worker threads, which Python does not know: there
 * PyGILState_Ensure made a Python thread state for every call and PyGILState_Release deleted it again (~16 us a
 * kernel, measured). The first call on such a thread keeps its state instead (taken, then the GIL released with the
 * state kept), so later calls only take the GIL. A thread that ends leaves its state on `ended`, deleted under the
 * GIL by the next call: never at thread exit, where the thread may be being joined by one holding the GIL. Both
 * are leaked on purpose: Paddle's threads may end after static destruction. */
std::mutex *ended_lock = new std::mutex;
std::vector<PyThreadState *> *ended = new std::vector<PyThreadState *>;

struct KeptState {
  PyThreadState *state = nullptr;
  ~KeptState() {
    if (!state) return;
    std::lock_guard<std::mutex> hold(*ended_lock);
    ended->push_back(state);
  }
};

void keep_thread_state() {
  static thread_local bool checked = false;
  static thread_local KeptState kept;
  if (checked) return;
  checked = true;
  if (PyGILState_GetThisThreadState()) return;  /* a thread Python knows (eager mode's caller): nothing to keep */
  PyGILState_Ensure();
  kept.state = PyEval_SaveThread();
}

void delete_ended_states() {  /* under the GIL */
  std::vector<PyThreadState *> states;
  {
    std::lock_guard<std::mutex> hold(*ended_lock);
    states.swap(*ended);
  }
  for (PyThreadState *s : states) {
    PyThreadState_Clear(s);
    PyThreadState_Delete(s);
  }
}

/* hwadapter_paddle.pykernels.run(type, op, inputs, output, attrs) under the GIL (output: a list of them when there
 * are several, as split's); the exception's text in *err. */
int call_python(const char *op, const HwaTensor *in, size_t nin, const HwaTensor *out, size_t nout,
                const HwaAttr *attrs, size_t na, std::string *err) {
  keep_thread_state();
  PyGILState_STATE gil = PyGILState_Ensure();
  delete_ended_states();
  PyObject *inputs = PyList_New((Py_ssize_t)nin), *kw = PyDict_New();
  for (size_t i = 0; i < nin; ++i) PyList_SET_ITEM(inputs, (Py_ssize_t)i, tensor_tuple(in[i], itemsize(in[i].dtype)));
  for (size_t i = 0; i < na; ++i) {
    PyObject *v;
    if (attrs[i].type == HWA_ATTR_FLOAT) {
      v = PyFloat_FromDouble(attrs[i].f);
    } else if (attrs[i].type == HWA_ATTR_INTS) {  /* axes, strides, paddings: a tuple, as the frontend passes */
      v = PyTuple_New((Py_ssize_t)attrs[i].count);
      for (size_t j = 0; j < attrs[i].count; ++j) PyTuple_SET_ITEM(v, (Py_ssize_t)j, PyLong_FromLongLong(attrs[i].ints[j]));
    } else if (attrs[i].type == HWA_ATTR_STRING) {
      v = PyUnicode_FromString(attrs[i].s);
    } else {
      v = PyLong_FromLongLong(attrs[i].i);
    }
    PyDict_SetItemString(kw, attrs[i].name, v);
    Py_DECREF(v);
  }
  static PyObject *run = nullptr;  /* hwadapter_paddle.pykernels.run, looked up once (under the GIL) */
  if (!run) {
    PyObject *module = PyImport_ImportModule("hwadapter_paddle.pykernels");
    run = module ? PyObject_GetAttrString(module, "run") : nullptr;
    Py_XDECREF(module);
  }
  PyObject *output = nout == 1 ? tensor_tuple(*out, itemsize(out->dtype)) : PyList_New((Py_ssize_t)nout);
  for (size_t i = 0; nout != 1 && i < nout; ++i)
    PyList_SET_ITEM(output, (Py_ssize_t)i, tensor_tuple(out[i], itemsize(out[i].dtype)));
  PyObject *result = run ? PyObject_CallFunction(run, "ssONO", HWA_PD_HWA_TYPE, op, inputs, output, kw) : nullptr;
  int rc = HWA_OK;
  if (!result) {
    *err = python_error("?");
    rc = HWA_ERROR;
  }
  Py_XDECREF(result);
  Py_DECREF(inputs);
  Py_DECREF(kw);
  PyGILState_Release(gil);
  return rc;
}

/* ---- composite kernels (training.py): a phi kernel (a grad, an optimizer step, a forward Paddle's way) run by
 * hwadapter_paddle.pykernels.run_composite as hwadapter's ops on this device: its inputs, attributes and outputs by
 * name, each output allocated here (Paddle's InferMeta has set its dims and dtype) before the GIL is taken. ---- */

class Composite {
 public:
  Composite(const char *phi_name, const phi::CustomContext &ctx, std::atomic<uint64_t> &calls)
      : phi_(phi_name), ctx_(ctx) {
    calls.fetch_add(1, std::memory_order_relaxed);
  }
  void in(const char *name, const phi::DenseTensor *x) { ins_.push_back({name, x, false, {}}); }
  void in(const char *name, const std::vector<const phi::DenseTensor *> &xs) { ins_.push_back({name, nullptr, true, xs}); }
  void in(const char *name, const std::vector<const phi::TensorBase *> &xs) {  /* add_n's: dense tensors only */
    std::vector<const phi::DenseTensor *> dense;
    for (const phi::TensorBase *x : xs) {
      auto *d = dynamic_cast<const phi::DenseTensor *>(x);
      if (x && !d)
        PADDLE_THROW(common::errors::Unimplemented("hwadapter-paddle: %s kernel %s: a sparse input (SelectedRows); "
                                                   "the device's kernels take dense tensors", HWA_PD_DEVICE_TYPE,
                                                   phi_));
      dense.push_back(d);
    }
    ins_.push_back({name, nullptr, true, dense});
  }
  void attr(const char *name, bool v) { attrs_.push_back({name, 'b', v, 0, {}, {}, ""}); }
  void attr(const char *name, int v) { attrs_.push_back({name, 'i', v, 0, {}, {}, ""}); }
  void attr(const char *name, int64_t v) { attrs_.push_back({name, 'i', v, 0, {}, {}, ""}); }
  void attr(const char *name, float v) { attrs_.push_back({name, 'f', 0, v, {}, {}, ""}); }
  void attr(const char *name, double v) { attrs_.push_back({name, 'f', 0, v, {}, {}, ""}); }
  void attr(const char *name, const std::string &v) { attrs_.push_back({name, 's', 0, 0, {}, {}, v}); }
  void attr(const char *name, const std::vector<int> &v) {
    attrs_.push_back({name, 'I', 0, 0, std::vector<int64_t>(v.begin(), v.end()), {}, ""});
  }
  void attr(const char *name, const std::vector<int64_t> &v) { attrs_.push_back({name, 'I', 0, 0, v, {}, ""}); }
  void attr(const char *name, const std::vector<float> &v) {
    attrs_.push_back({name, 'F', 0, 0, {}, std::vector<double>(v.begin(), v.end()), ""});
  }
  void attr(const char *name, const phi::IntArray &v) { attrs_.push_back({name, 'I', 0, 0, v.GetData(), {}, ""}); }
  void attr(const char *name, const phi::Scalar &v) {
    /* a Scalar keeps its own dtype: integers as ints, the rest as Python floats (double: float32 values exact) */
    phi::DataType d = v.dtype();
    bool integer = d == phi::DataType::INT32 || d == phi::DataType::INT64 || d == phi::DataType::INT16 ||
                   d == phi::DataType::INT8 || d == phi::DataType::UINT8 || d == phi::DataType::BOOL;
    if (integer) attrs_.push_back({name, 'i', v.to<int64_t>(), 0, {}, {}, ""});
    else attrs_.push_back({name, 'f', 0, v.to<double>(), {}, {}, ""});
  }
  void attr(const char *name, phi::DataType v) { attrs_.push_back({name, 'd', any_code(v), 0, {}, {}, ""}); }
  /* an output Paddle wants (out not null), allocated where `like` lives when given (an optimizer's beta powers stay
   * on the CPU), else on the device; dtype as InferMeta set it, else T's */
  template <typename T>
  void out(const char *name, phi::DenseTensor *t, const phi::DenseTensor *like = nullptr) {
    if (t && t->dims().size() > 0 && t->dims()[0] < 0) t = nullptr;  /* no shape set (batch_norm's reserve_space) */
    if (t) {
      phi::DataType d = t->dtype() == phi::DataType::UNDEFINED ? phi::CppTypeToDataType<T>::Type() : t->dtype();
      if (like && like->place().GetType() == phi::AllocationType::CPU) ctx_.HostAlloc(t, d);
      else ctx_.Alloc(t, d);
    }
    outs_.push_back({name, t});
  }
  void out(const char *name, const std::vector<phi::DenseTensor *> &ts) {
    for (phi::DenseTensor *t : ts)
      if (t) ctx_.Alloc(t, t->dtype());
    list_outs_.push_back({name, ts});
  }
  void run();

 private:
  struct In { const char *name; const phi::DenseTensor *x; bool list; std::vector<const phi::DenseTensor *> xs; };
  struct Attr { const char *name; char kind; int64_t i; double f; std::vector<int64_t> ints; std::vector<double> floats;
                std::string s; };
  struct Out { const char *name; phi::DenseTensor *t; };
  struct ListOut { const char *name; std::vector<phi::DenseTensor *> ts; };
  const char *phi_;
  const phi::CustomContext &ctx_;
  std::vector<In> ins_;
  std::vector<Attr> attrs_;
  std::vector<Out> outs_;
  std::vector<ListOut> list_outs_;

  /* (memoryview or None, shape, strides in elements, dtype code, on the host) under the GIL; None for no tensor */
  PyObject *tuple_of(const phi::DenseTensor *x) const {
    if (!x) Py_RETURN_NONE;
    /* an input Paddle passes without its buffer (add_grad's x and y: only their shapes matter) has memory None */
    int32_t code = any_code(x->dtype());
    if (code < 0) {
      PyErr_Format(PyExc_TypeError, "a %s tensor (hwadapter-paddle passes bool, integers, float16/32/64)",
                   phi::DataTypeToString(x->dtype()).c_str());
      return nullptr;
    }
    int nd = x->dims().size();
    bool strided = x->strides().size() == nd;
    PyObject *shape = PyTuple_New(nd), *strides = PyTuple_New(nd);
    int64_t span = 1, s = 1;
    for (int d = nd - 1; d >= 0; --d) {
      int64_t stride = strided ? x->strides()[d] : s;
      s *= x->dims()[d] > 0 ? x->dims()[d] : 1;
      PyTuple_SET_ITEM(shape, d, PyLong_FromLongLong(x->dims()[d]));
      PyTuple_SET_ITEM(strides, d, PyLong_FromLongLong(stride));
      span += (x->dims()[d] - 1) * stride;
    }
    PyObject *memory = x->numel() > 0 && x->initialized()
        ? PyMemoryView_FromMemory((char *)const_cast<void *>(x->data()), (Py_ssize_t)(span * itemsize(code)),
                                  PyBUF_WRITE)
        : Py_NewRef(Py_None);
    /* place() throws for a tensor without memory (an input passed without its buffer) */
    bool host = x->initialized() && x->place().GetType() == phi::AllocationType::CPU;
    return Py_BuildValue("(NNNiO)", memory, shape, strides, (int)code, host ? Py_True : Py_False);
  }
  PyObject *attr_value(const Attr &a) const {
    switch (a.kind) {
      case 'b': return PyBool_FromLong((long)a.i);
      case 'i': case 'd': return PyLong_FromLongLong(a.i);
      case 'f': return PyFloat_FromDouble(a.f);
      case 's': return PyUnicode_FromString(a.s.c_str());
      case 'F': {
        PyObject *v = PyTuple_New((Py_ssize_t)a.floats.size());
        for (size_t j = 0; j < a.floats.size(); ++j) PyTuple_SET_ITEM(v, (Py_ssize_t)j, PyFloat_FromDouble(a.floats[j]));
        return v;
      }
      default: {
        PyObject *v = PyTuple_New((Py_ssize_t)a.ints.size());
        for (size_t j = 0; j < a.ints.size(); ++j) PyTuple_SET_ITEM(v, (Py_ssize_t)j, PyLong_FromLongLong(a.ints[j]));
        return v;
      }
    }
  }
  bool put(PyObject *dict, const char *name, PyObject *v) const {
    if (!v) return false;
    PyDict_SetItemString(dict, name, v);
    Py_DECREF(v);
    return true;
  }
  PyObject *list_of(const std::vector<const phi::DenseTensor *> &xs) const {
    PyObject *l = PyList_New((Py_ssize_t)xs.size());
    for (size_t i = 0; i < xs.size(); ++i) {
      PyObject *t = tuple_of(xs[i]);
      if (!t) { Py_DECREF(l); return nullptr; }
      PyList_SET_ITEM(l, (Py_ssize_t)i, t);
    }
    return l;
  }
};

void Composite::run() {
  int device = ctx_.GetPlace().GetDeviceId();
  ctx_.Wait();  /* the Python side runs at once, on the host: earlier work must be done */
  keep_thread_state();
  PyGILState_STATE gil = PyGILState_Ensure();
  delete_ended_states();
  static PyObject *run = nullptr;  /* hwadapter_paddle.pykernels.run_composite, looked up once (under the GIL) */
  if (!run) {
    PyObject *module = PyImport_ImportModule("hwadapter_paddle.pykernels");
    run = module ? PyObject_GetAttrString(module, "run_composite") : nullptr;
    Py_XDECREF(module);
  }
  PyObject *ins = PyDict_New(), *attrs = PyDict_New(), *outs = PyDict_New(), *result = nullptr;
  bool ok = run != nullptr;
  std::string err;
  try {  /* a C++ exception must not leave with the GIL held: Paddle's thread would wait for it forever */
    for (const In &i : ins_) ok = ok && put(ins, i.name, i.list ? list_of(i.xs) : tuple_of(i.x));
    for (const Attr &a : attrs_) ok = ok && put(attrs, a.name, attr_value(a));
    for (const Out &o : outs_) ok = ok && put(outs, o.name, tuple_of(o.t));
    for (const ListOut &o : list_outs_)
      ok = ok && put(outs, o.name, list_of(std::vector<const phi::DenseTensor *>(o.ts.begin(), o.ts.end())));
  } catch (const std::exception &e) {
    ok = false;
    err = std::string("describing the tensors: ") + e.what();
  }
  if (ok) result = PyObject_CallFunction(run, "sisOOO", HWA_PD_HWA_TYPE, device, phi_, ins, attrs, outs);
  if (!result && err.empty()) err = python_error("hwadapter_paddle.pykernels.run_composite is missing");
  Py_XDECREF(result);
  Py_DECREF(ins);
  Py_DECREF(attrs);
  Py_DECREF(outs);
  PyGILState_Release(gil);
  if (!err.empty())
    PADDLE_THROW(common::errors::External("hwadapter-paddle: %s kernel %s on device %d (hwadapter's ops on the "
                                          "plugin's kernels) failed: %s", HWA_PD_DEVICE_TYPE, phi_, device,
                                          err.c_str()));
}
#else
/* The library's kernel for (op, input dtypes); generated registrations only name pairs the table declares. */
HwaKernelFn find_kernel(const char *op, std::initializer_list<int32_t> dtypes) {
  const HwaDeviceInterface &t = api();
  for (size_t k = 0; t.kernels && k < t.num_kernels; ++k) {
    const HwaKernelDef &d = t.kernels[k];
    if (!d.op || strcmp(d.op, op) != 0 || d.num_inputs != dtypes.size() || !d.fn) continue;
    size_t i = 0;
    for (int32_t want : dtypes)
      if (d.input_dtypes[i] != want) break;
      else ++i;
    if (i == dtypes.size()) return d.fn;
  }
  PADDLE_THROW(common::errors::Unimplemented(
      "hwadapter-paddle: %s: the device library %s no longer has a kernel for %s of these dtypes (it was there at "
      "install time); run `hwadapter paddle install %s` again", HWA_PD_DEVICE_TYPE, HWA_PD_LIBRARY, op,
      HWA_PD_DEVICE_TYPE));
}
#endif

/* ---- phi types <-> HwaDType (numbered as Paddle's C_DataType) ---- */
template <typename T> struct Code;
#define HWA_CODE(T, C) template <> struct Code<T> { static constexpr int32_t value = C; };
HWA_CODE(bool, HWA_BOOL)
HWA_CODE(uint8_t, HWA_UINT8)
HWA_CODE(int8_t, HWA_INT8)
HWA_CODE(int16_t, HWA_INT16)
HWA_CODE(int32_t, HWA_INT32)
HWA_CODE(int64_t, HWA_INT64)
HWA_CODE(phi::dtype::float16, HWA_FLOAT16)
HWA_CODE(float, HWA_FLOAT32)
HWA_CODE(double, HWA_FLOAT64)
#undef HWA_CODE

/* The HwaDType of a Paddle dtype (the inputs of where and gather, which are not all T). */
int32_t code_of(phi::DataType d) {
  int32_t code = any_code(d);
  return code < 0 ? HWA_FLOAT64 : code;  /* the only other dtype registered */
}

/* A DenseTensor as a kernel sees it: Paddle's element strides (kernels read them), data NULL when empty. */
struct Desc {
  std::vector<int64_t> shape, strides;
  HwaTensor t;
  Desc(const phi::DenseTensor &x, const void *data, bool contiguous_strides) {
    int nd = x.dims().size();
    shape.resize(nd);
    strides.resize(nd);
    for (int d = 0; d < nd; ++d) shape[d] = x.dims()[d];
    if (!contiguous_strides && x.strides().size() == nd) {
      for (int d = 0; d < nd; ++d) strides[d] = x.strides()[d];
    } else {
      int64_t s = 1;
      for (int d = nd - 1; d >= 0; --d) strides[d] = s, s *= shape[d] > 0 ? shape[d] : 1;
    }
    t.data = x.numel() > 0 ? const_cast<void *>(data) : nullptr;
    t.dtype = 0;
    t.ndim = nd;
    t.shape = shape.data();
    t.strides = strides.data();
  }
};

/* ---- output shapes: computed here, as Paddle's CPU kernels do (MatmulInferMeta keeps x's batch dims when x has
 * more dimensions: (2,1,4,3) @ (3,3,4) would get (2,1,...) where numpy's broadcast gives (2,3,...)) ---- */
using Shape = std::vector<int64_t>;

Shape shape_of(const phi::DenseTensor &x) {
  Shape s(x.dims().size());
  for (int d = 0; d < x.dims().size(); ++d) s[d] = x.dims()[d];
  return s;
}

[[noreturn]] void shape_error(const char *phi_name, const Shape &a, const Shape &b) {
  auto text = [](const Shape &s) {
    std::string t = "[";
    for (size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
    return t + "]";
  };
  PADDLE_THROW(common::errors::InvalidArgument("hwadapter-paddle: %s kernel %s: shapes %s and %s do not fit "
                                               "(numpy's broadcasting and matmul rules)", HWA_PD_DEVICE_TYPE, phi_name,
                                               text(a).c_str(), text(b).c_str()));
}

/* numpy's broadcast of two shapes (dims aligned right; a size 1 repeats). */
Shape broadcast(const char *phi_name, const Shape &a, const Shape &b) {
  Shape out(std::max(a.size(), b.size()));
  for (size_t i = 0; i < out.size(); ++i) {
    int64_t da = i < out.size() - a.size() ? 1 : a[i - (out.size() - a.size())];
    int64_t db = i < out.size() - b.size() ? 1 : b[i - (out.size() - b.size())];
    if (da != db && da != 1 && db != 1) shape_error(phi_name, a, b);
    out[i] = da == 1 ? db : da;
  }
  return out;
}

Shape binary_shape(const char *phi_name, const phi::DenseTensor &x, const phi::DenseTensor &y) {
  return broadcast(phi_name, shape_of(x), shape_of(y));
}

/* numpy's matmul: batch dims broadcast, a 1-D x is a row and a 1-D y a column (removed afterwards); transposes
 * swap the last two dims of a >= 2-D operand. */
Shape matmul_shape(const char *phi_name, const phi::DenseTensor &x, const phi::DenseTensor &y, bool tx, bool ty) {
  Shape a = shape_of(x), b = shape_of(y);
  if (a.empty() || b.empty()) shape_error(phi_name, a, b);
  if (a.size() >= 2 && tx) std::swap(a[a.size() - 1], a[a.size() - 2]);
  if (b.size() >= 2 && ty) std::swap(b[b.size() - 1], b[b.size() - 2]);
  int64_t k_a = a.back(), k_b = b.size() >= 2 ? b[b.size() - 2] : b[0];
  if (k_a != k_b) shape_error(phi_name, a, b);
  Shape batch_a(a.begin(), a.end() - std::min<size_t>(a.size(), 2)), batch_b(b.begin(), b.end() - std::min<size_t>(b.size(), 2));
  Shape out = broadcast(phi_name, batch_a, batch_b);
  if (a.size() >= 2) out.push_back(a[a.size() - 2]);
  if (b.size() >= 2) out.push_back(b.back());
  return out;
}

struct Counter {
  const char *name;
  std::atomic<uint64_t> *calls;
};

/* The inputs as a kernel sees them: each of dtype T, or (where, gather, ...) of its position's in in_dtypes. The
 * inputs: a braced list, or (concat) a vector of any length. */
template <typename T, typename Ins>
std::vector<Desc> describe(const char *phi_name, const phi::CustomContext &ctx, const Ins &ins,
                           const phi::DataType *in_dtypes) {
  std::vector<Desc> in;
  in.reserve(ins.size());
  for (const phi::DenseTensor *x : ins) {
    /* each input T, or (where, gather) the dtype of its position in in_dtypes */
    const phi::DataType want = in_dtypes ? in_dtypes[in.size()] : phi::CppTypeToDataType<T>::Type();
    if (x->dtype() != want)
      PADDLE_THROW(common::errors::InvalidArgument(
          "hwadapter-paddle: %s kernel %s on %s: inputs of mixed dtypes (%s and %s); cast them to one dtype first",
          HWA_PD_DEVICE_TYPE, phi_name, ctx.GetPlace().DebugString().c_str(),
          phi::DataTypeToString(x->dtype()).c_str(), phi::DataTypeToString(want).c_str()));
    in.emplace_back(*x, x->data(), false);
    in.back().t.dtype = in_dtypes ? code_of(want) : Code<T>::value;
  }
  return in;
}

/* The library's kernel `fn` (the plugin's Python kernel in the Python-kernel library) on described inputs and
 * outputs, allocated by the caller with Paddle's allocator. */
void call(const char *phi_name, const char *op, HwaKernelFn fn, const phi::CustomContext &ctx,
          const std::vector<Desc> &in, const HwaTensor *outs, size_t nout, const HwaAttr *attrs, size_t num_attrs) {
  std::vector<HwaTensor> tin;
  for (auto &d : in) tin.push_back(d.t);
  int device = ctx.GetPlace().GetDeviceId();
#ifdef HWA_PD_PYTHON
  (void)fn;
  std::string err;
  ctx.Wait();  /* the plugin's Python kernel runs at once, on the host: earlier work must be done */
  if (call_python(op, tin.data(), tin.size(), outs, nout, attrs, num_attrs, &err) != HWA_OK)
    PADDLE_THROW(common::errors::External("hwadapter-paddle: %s kernel %s (the plugin's Python %s) on device %d "
                                          "failed: %s", HWA_PD_DEVICE_TYPE, phi_name, op, device, err.c_str()));
  return;
#endif
  int rc = fn(device, (HwaStream)ctx.stream(), tin.data(), tin.size(), const_cast<HwaTensor *>(outs), nout, attrs,
              num_attrs);
  if (rc != HWA_OK)
    PADDLE_THROW(common::errors::External(
        "hwadapter-paddle: %s kernel %s (the library's %s) on device %d failed (%s)%s; the device library %s is at "
        "fault; `hwadapter paddle install --runtime-only %s` leaves every op to Paddle's CPU kernels",
        HWA_PD_DEVICE_TYPE, phi_name, op, device, status_name(rc), library_message().c_str(), HWA_PD_LIBRARY,
        HWA_PD_DEVICE_TYPE));
}

/* One call of the library's kernel `fn` for phi kernel `phi_name`: inputs of dtype T only (but in_dtypes), out (of
 * dtype U) allocated here with Paddle's allocator; Paddle sees out as paddle_shape when given. */
template <typename T, typename U, typename Ins = std::initializer_list<const phi::DenseTensor *>>
void launch(const char *phi_name, const char *op, HwaKernelFn fn, const phi::CustomContext &ctx,
            const Ins &ins, const Shape &out_shape, phi::DenseTensor *out,
            const HwaAttr *attrs, size_t num_attrs, std::atomic<uint64_t> &calls,
            const Shape *paddle_shape = nullptr, const phi::DataType *in_dtypes = nullptr) {
  calls.fetch_add(1, std::memory_order_relaxed);
  std::vector<Desc> in = describe<T>(phi_name, ctx, ins, in_dtypes);
  out->Resize(common::make_ddim(out_shape));
  U *data = ctx.template Alloc<U>(out);
  if (out->numel() == 0) return;  /* a kernel is not called when its output is empty (device_api.h) */
  Desc o(*out, data, true);
  o.t.dtype = Code<U>::value;
  if (paddle_shape) out->Resize(common::make_ddim(*paddle_shape));  /* the kernel saw out_shape (a 0-d as 1-D) */
  call(phi_name, op, fn, ctx, in, &o.t, 1, attrs, num_attrs);
}

/* launch with several outputs of dtype T (split's), allocated here; the kernel is called unless all are empty. */
template <typename T>
void launch_outs(const char *phi_name, const char *op, HwaKernelFn fn, const phi::CustomContext &ctx,
                 const phi::DenseTensor &x, const std::vector<phi::DenseTensor *> &outs,
                 const std::vector<Shape> &shapes, const HwaAttr *attrs, size_t num_attrs,
                 std::atomic<uint64_t> &calls) {
  calls.fetch_add(1, std::memory_order_relaxed);
  std::vector<Desc> in = describe<T>(phi_name, ctx, std::initializer_list<const phi::DenseTensor *>{&x}, nullptr);
  std::vector<Desc> o;
  o.reserve(outs.size());
  std::vector<HwaTensor> touts;
  bool any = false;
  for (size_t i = 0; i < outs.size(); ++i) {
    outs[i]->Resize(common::make_ddim(shapes[i]));
    T *data = ctx.template Alloc<T>(outs[i]);
    o.emplace_back(*outs[i], data, true);
    o.back().t.dtype = Code<T>::value;
    touts.push_back(o.back().t);
    any = any || outs[i]->numel() > 0;
  }
  if (any) call(phi_name, op, fn, ctx, in, touts.data(), touts.size(), attrs, num_attrs);
}


/* ---- the forms with attributes (optable.FORMS): Paddle's arguments as hwadapter's kernel attributes (docs/ops.md),
 * output shapes as Paddle's InferMeta gives them. What the op cannot say exactly is refused here, at run time, with
 * the reason: Paddle has no per-call fallback for a registered kernel. ---- */
[[noreturn]] void refuse(const char *phi_name, const phi::CustomContext &ctx, const std::string &what) {
  PADDLE_THROW(common::errors::Unimplemented(
      "hwadapter-paddle: %s kernel %s on %s: %s; the device's kernel cannot do this and Paddle has no per-call "
      "fallback: change the call, move the tensors to the CPU for it, or run `hwadapter paddle install "
      "--runtime-only %s` to leave every op to Paddle's CPU kernels", HWA_PD_DEVICE_TYPE, phi_name,
      ctx.GetPlace().DebugString().c_str(), what.c_str(), HWA_PD_DEVICE_TYPE));
}

[[noreturn]] void bad_argument(const char *phi_name, const std::string &what) {
  PADDLE_THROW(common::errors::InvalidArgument("hwadapter-paddle: %s kernel %s: %s", HWA_PD_DEVICE_TYPE, phi_name,
                                               what.c_str()));
}

HwaAttr int_attr(const char *name, int64_t v) { return {name, HWA_ATTR_INT, v, 0, nullptr, 0, nullptr}; }
HwaAttr ints_attr(const char *name, const std::vector<int64_t> &v) {
  return {name, HWA_ATTR_INTS, 0, 0, v.data(), v.size(), nullptr};
}

/* sum, mean, max, min: Paddle's dims (negative allowed; none, or a 0-d x: every axis) -> sorted axes, keepdim. */
template <typename T>
void reduce(const char *phi_name, const char *op, HwaKernelFn fn, const phi::CustomContext &ctx,
            const phi::DenseTensor &x, const std::vector<int64_t> &dims, bool keep_dim, phi::DenseTensor *out,
            std::atomic<uint64_t> &calls) {
  Shape in = shape_of(x), shape;
  const int64_t rank = (int64_t)in.size(), span = std::max<int64_t>(rank, 1);
  std::vector<bool> reduced(rank, dims.empty());
  for (int64_t d : dims) {
    if (d < -span || d >= span)
      bad_argument(phi_name, "axis " + std::to_string(d) + " is out of range for a " + std::to_string(rank) +
                                 "-d tensor");
    if (rank) reduced[d < 0 ? d + rank : d] = true;
  }
  std::vector<int64_t> axes;
  for (int64_t a = 0; a < rank; ++a) {
    if (reduced[a]) {
      axes.push_back(a);
      if (keep_dim) shape.push_back(1);
      if (in[a] == 0 && (!strcmp(op, "max") || !strcmp(op, "min")))  /* Paddle's CPU refuses this too */
        bad_argument(phi_name, "cannot reduce along an axis (" + std::to_string(a) + ") that has a size of 0");
    } else {
      shape.push_back(in[a]);
    }
  }
  HwaAttr attrs[2] = {ints_attr("axis", axes), int_attr("keepdim", keep_dim)};
  launch<T, T>(phi_name, op, fn, ctx, {&x}, shape, out, attrs, 2, calls);
}

/* sum's out_dtype: hwadapter's sum kernel keeps x's dtype (the frontend casts first), so another one is refused. */
template <typename T>
void sum(const char *phi_name, const char *op, HwaKernelFn fn, const phi::CustomContext &ctx,
         const phi::DenseTensor &x, const std::vector<int64_t> &dims, phi::DataType out_dtype, bool keep_dim,
         phi::DenseTensor *out, std::atomic<uint64_t> &calls) {
  const phi::DataType own = phi::CppTypeToDataType<T>::Type();
  if (out_dtype != phi::DataType::UNDEFINED && out_dtype != own)
    refuse(phi_name, ctx, "a sum of " + phi::DataTypeToString(own) + " into " + phi::DataTypeToString(out_dtype) +
                              " (cast the input with paddle.cast first)");
  reduce<T>(phi_name, op, fn, ctx, x, dims, keep_dim, out, calls);
}

/* softmax: axis made non-negative; a 0-d x is passed as one element (the kernel takes >= 1-D). */
template <typename T>
void softmax(const char *phi_name, const char *op, HwaKernelFn fn, const phi::CustomContext &ctx,
             const phi::DenseTensor &x, int axis, phi::DenseTensor *out, std::atomic<uint64_t> &calls) {
  Shape in = shape_of(x);
  const int64_t rank = (int64_t)in.size(), span = std::max<int64_t>(rank, 1);
  if (axis < -span || axis >= span)
    bad_argument(phi_name, "axis " + std::to_string(axis) + " is out of range for a " + std::to_string(rank) +
                               "-d tensor");
  HwaAttr attrs[1] = {int_attr("axis", axis < 0 ? axis + span : axis)};
  if (rank > 0) return launch<T, T>(phi_name, op, fn, ctx, {&x}, in, out, attrs, 1, calls);
  phi::DenseTensor one(x);  /* shares x's memory */
  one.Resize(common::make_ddim({1}));
  launch<T, T>(phi_name, op, fn, ctx, {&one}, Shape{1}, out, attrs, 1, calls, &in);
}

/* Paddle's paddings: 2 values (h, w) or 4 (top, bottom, left, right); SAME and VALID as UpdatePaddingAndDilation
 * resolves them (SAME: the output ceil(size / stride), the odd element of padding at the end). */
std::vector<int64_t> paddings_of(const char *phi_name, const std::vector<int64_t> &p, const std::string &algorithm,
                                 const Shape &in, const std::vector<int64_t> &stride, const std::vector<int64_t> &k) {
  std::vector<int64_t> pad;
  if (p.size() == 2) pad = {p[0], p[0], p[1], p[1]};
  else if (p.size() == 4) pad = p;
  else bad_argument(phi_name, "paddings must have 2 or 4 values, not " + std::to_string(p.size()));
  for (int i = 0; i < 2; ++i) {
    if (algorithm == "SAME") {
      int64_t size = in[2 + i], o = (size + stride[i] - 1) / stride[i];
      int64_t total = std::max<int64_t>((o - 1) * stride[i] + k[i] - size, 0);
      pad[2 * i] = total / 2, pad[2 * i + 1] = total - total / 2;
    } else if (algorithm == "VALID") {
      pad[2 * i] = pad[2 * i + 1] = 0;
    }
  }
  return pad;
}

template <typename T>
void conv2d(const char *phi_name, const char *op, HwaKernelFn fn, const phi::CustomContext &ctx,
            const phi::DenseTensor &input, const phi::DenseTensor &filter, const std::vector<int> &strides,
            const std::vector<int> &paddings, const std::string &padding_algorithm, const std::vector<int> &dilations,
            int groups, const std::string &data_format, phi::DenseTensor *out, std::atomic<uint64_t> &calls) {
  if (data_format == "NHWC") refuse(phi_name, ctx, "data_format NHWC (hwadapter's conv2d kernels take NCHW)");
  Shape x = shape_of(input), w = shape_of(filter);
  if (x.size() != 4 || w.size() != 4 || strides.size() != 2 || dilations.size() != 2) shape_error(phi_name, x, w);
  std::vector<int64_t> stride(strides.begin(), strides.end()), dilation(dilations.begin(), dilations.end());
  if (padding_algorithm == "SAME") dilation = {1, 1};  /* Paddle's rule: SAME ignores the dilation */
  std::vector<int64_t> pad = paddings_of(phi_name, std::vector<int64_t>(paddings.begin(), paddings.end()),
                                         padding_algorithm, x, stride, {w[2], w[3]});
  if (groups < 1 || x[1] != groups * w[1] || w[0] % groups) shape_error(phi_name, x, w);
  Shape shape = {x[0], w[0], 0, 0};
  for (int i = 0; i < 2; ++i) {
    if (stride[i] < 1 || dilation[i] < 1 || pad[2 * i] < 0 || pad[2 * i + 1] < 0)
      bad_argument(phi_name, "strides and dilations must be positive and paddings non-negative");
    int64_t reach = (w[2 + i] - 1) * dilation[i] + 1, padded = x[2 + i] + pad[2 * i] + pad[2 * i + 1];
    if (padded < reach) shape_error(phi_name, x, w);
    shape[2 + i] = (padded - reach) / stride[i] + 1;
  }
  HwaAttr attrs[4] = {ints_attr("stride", stride), ints_attr("padding", pad), ints_attr("dilation", dilation),
                      int_attr("groups", groups)};
  launch<T, T>(phi_name, op, fn, ctx, {&input, &filter}, shape, out, attrs, 4, calls);
}

/* pool2d -> max_pool2d, avg_pool2d or adaptive_avg_pool2d. Paddle's window rules where they are hwadapter's: its
 * ceil_mode keeps a last window that starts past the input (hwadapter drops it) and divides a partial last window by
 * its real size even with exclusive=False; those calls are refused. */
template <typename T>
void pool2d(const char *phi_name, HwaKernelFn fn_max, HwaKernelFn fn_avg, HwaKernelFn fn_adaptive,
            const phi::CustomContext &ctx, const phi::DenseTensor &x, const std::vector<int64_t> &kernel_size,
            const std::vector<int64_t> &strides, const std::vector<int64_t> &paddings, bool ceil_mode, bool exclusive,
            const std::string &data_format, const std::string &pooling_type, bool global_pooling, bool adaptive,
            const std::string &padding_algorithm, phi::DenseTensor *out, std::atomic<uint64_t> &calls) {
  if (data_format == "NHWC") refuse(phi_name, ctx, "data_format NHWC (hwadapter's pooling kernels take NCHW)");
  const bool is_max = pooling_type == "max";
  if (!is_max && pooling_type != "avg") refuse(phi_name, ctx, "pooling_type " + pooling_type);
  Shape in = shape_of(x);
  if (in.size() != 4 || kernel_size.size() != 2 || strides.size() != 2)
    bad_argument(phi_name, "pool2d takes a 4-d NCHW x, 2 kernel sizes and 2 strides");
  std::vector<int64_t> k = kernel_size, stride = strides;
  if (global_pooling) k = {in[2], in[3]};
  if (adaptive && !global_pooling) {  /* kernel_size is the output size; cells as hwadapter's (floor/ceil bounds) */
    if (is_max) refuse(phi_name, ctx, "adaptive max pooling through pool2d");
    if (k[0] < 1 || k[1] < 1 || in[2] < 1 || in[3] < 1)
      bad_argument(phi_name, "adaptive pooling needs a positive output size and a non-empty input");
    HwaAttr attrs[1] = {ints_attr("output_size", k)};
    return launch<T, T>(phi_name, "adaptive_avg_pool2d", fn_adaptive, ctx, {&x}, Shape{in[0], in[1], k[0], k[1]},
                        out, attrs, 1, calls);
  }
  std::vector<int64_t> pad = global_pooling ? std::vector<int64_t>{0, 0, 0, 0}
                                            : paddings_of(phi_name, paddings, padding_algorithm, in, stride, k);
  Shape shape = {in[0], in[1], 0, 0};
  bool partial = false;  /* ceil_mode adds a window somewhere */
  for (int i = 0; i < 2; ++i) {
    if (k[i] < 1 || stride[i] < 1 || pad[2 * i] < 0 || pad[2 * i + 1] < 0)
      bad_argument(phi_name, "kernel sizes and strides must be positive and paddings non-negative");
    if (2 * pad[2 * i] > k[i] || 2 * pad[2 * i + 1] > k[i])
      refuse(phi_name, ctx, "a padding of more than half the window (a window could see only padding)");
    int64_t room = in[2 + i] + pad[2 * i] + pad[2 * i + 1] - k[i];
    if (room < 0) bad_argument(phi_name, "the window is larger than the padded input");
    int64_t floor_out = room / stride[i] + 1, out_size = ceil_mode ? (room + stride[i] - 1) / stride[i] + 1 : floor_out;
    if (out_size != floor_out) {
      partial = true;
      if ((out_size - 1) * stride[i] >= in[2 + i] + pad[2 * i])
        refuse(phi_name, ctx, "ceil_mode with a last window that starts past the input (Paddle keeps it, hwadapter "
                              "drops it)");
    }
    shape[2 + i] = out_size;
  }
  if (partial && !is_max && !exclusive)
    refuse(phi_name, ctx, "ceil_mode with exclusive=False and a partial last window (Paddle divides it by its real "
                          "size, hwadapter by the window's)");
  HwaAttr attrs[5] = {ints_attr("kernel_size", k), ints_attr("stride", stride), ints_attr("padding", pad),
                      int_attr("ceil_mode", partial), int_attr("exclusive", exclusive)};
  launch<T, T>(phi_name, is_max ? "max_pool2d" : "avg_pool2d", is_max ? fn_max : fn_avg, ctx, {&x}, shape, out,
               attrs, is_max ? 4 : 5, calls);
}

/* bitwise_left_shift, bitwise_right_shift: hwadapter's right shift of a signed dtype is arithmetic, so Paddle's
 * is_arithmetic=False is refused for it (a left shift, and any shift of uint8, is the same either way). */
template <typename T>
void shift(const char *phi_name, const char *op, HwaKernelFn fn, const phi::CustomContext &ctx,
           const phi::DenseTensor &x, const phi::DenseTensor &y, bool is_arithmetic, phi::DenseTensor *out,
           std::atomic<uint64_t> &calls) {
  if (!is_arithmetic && std::is_signed<T>::value && !strcmp(op, "right_shift"))
    refuse(phi_name, ctx, "a logical right shift (is_arithmetic=False) of " +
                              phi::DataTypeToString(phi::CppTypeToDataType<T>::Type()) +
                              " (hwadapter's right shift of a signed dtype is arithmetic)");
  launch<T, T>(phi_name, op, fn, ctx, {&x, &y}, binary_shape(phi_name, x, y), out, nullptr, 0, calls);
}

/* clip: the bounds as Paddle's CPU reads them (Scalar::to<T>), passed in x's kind. numpy's clip differs from
 * Paddle's where min > max (Paddle's CPU refuses it too) and for a nan bound: both refused. */
template <typename T>
void clip(const char *phi_name, const char *op, HwaKernelFn fn, const phi::CustomContext &ctx,
          const phi::DenseTensor &x, const phi::Scalar &min, const phi::Scalar &max, phi::DenseTensor *out,
          std::atomic<uint64_t> &calls) {
  const T lo = min.to<T>(), hi = max.to<T>();
  if (lo != lo || hi != hi) refuse(phi_name, ctx, "a nan bound");
  if (lo > hi)
    bad_argument(phi_name, "min (" + std::to_string((double)lo) + ") is greater than max (" +
                               std::to_string((double)hi) + ")");
  HwaAttr attrs[2];
  if (std::is_floating_point<T>::value) {
    attrs[0] = {"min", HWA_ATTR_FLOAT, 0, (double)lo, nullptr, 0, nullptr};
    attrs[1] = {"max", HWA_ATTR_FLOAT, 0, (double)hi, nullptr, 0, nullptr};
  } else {
    attrs[0] = int_attr("min", (int64_t)lo), attrs[1] = int_attr("max", (int64_t)hi);
  }
  launch<T, T>(phi_name, op, fn, ctx, {&x}, shape_of(x), out, attrs, 2, calls);
}

/* x itself, or (flatten, or a 0-d x) a 1-D view of it: the kernels take an axis of a >= 1-D tensor. */
phi::DenseTensor as_1d(const char *phi_name, const phi::CustomContext &ctx, const phi::DenseTensor &x) {
  if (!x.meta().is_contiguous()) refuse(phi_name, ctx, "flattening a strided view");
  phi::DenseTensor flat(x);  /* shares x's memory */
  flat.Resize(common::make_ddim({x.numel()}));
  return flat;
}

/* transpose: Paddle's axis (negative allowed) -> perm, checked to be a permutation. */
template <typename T>
void transpose(const char *phi_name, const char *op, HwaKernelFn fn, const phi::CustomContext &ctx,
               const phi::DenseTensor &x, const std::vector<int> &axis, phi::DenseTensor *out,
               std::atomic<uint64_t> &calls) {
  Shape in = shape_of(x), shape;
  const int64_t rank = (int64_t)in.size();
  std::vector<int64_t> perm;
  std::vector<bool> seen(rank, false);
  for (int a : axis) {
    int64_t p = a < 0 ? a + rank : a;
    if (p < 0 || p >= rank || seen[p] || (int64_t)axis.size() != rank)
      bad_argument(phi_name, "axis is not a permutation of the " + std::to_string(rank) + " axes");
    seen[p] = true;
    perm.push_back(p);
    shape.push_back(in[p]);
  }
  if ((int64_t)axis.size() != rank)  /* also an empty axis for a >= 1-d x */
    bad_argument(phi_name, "axis is not a permutation of the " + std::to_string(rank) + " axes");
  HwaAttr attrs[1] = {ints_attr("perm", perm)};  /* a 0-d x: perm () */
  launch<T, T>(phi_name, op, fn, ctx, {&x}, shape, out, attrs, 1, calls);
}

/* cumsum: flatten as Paddle's CumInferMeta (a 1-D result of every element); the axis made non-negative. */
template <typename T>
void cumsum(const char *phi_name, const char *op, HwaKernelFn fn, const phi::CustomContext &ctx,
            const phi::DenseTensor &x, const phi::Scalar &axis, bool flatten, bool exclusive, bool reverse,
            phi::DenseTensor *out, std::atomic<uint64_t> &calls) {
  Shape in = shape_of(x);
  const int64_t rank = (int64_t)in.size(), span = std::max<int64_t>(rank, 1), a = axis.to<int64_t>();
  if (!flatten && (a < -span || a >= span))
    bad_argument(phi_name, "axis " + std::to_string(a) + " is out of range for a " + std::to_string(rank) +
                               "-d tensor");
  HwaAttr attrs[3] = {int_attr("axis", flatten || rank == 0 ? 0 : (a < 0 ? a + rank : a)),
                      int_attr("exclusive", exclusive), int_attr("reverse", reverse)};
  if (!flatten && rank > 0) return launch<T, T>(phi_name, op, fn, ctx, {&x}, in, out, attrs, 3, calls);
  phi::DenseTensor flat = as_1d(phi_name, ctx, x);
  Shape paddle = flatten ? Shape{x.numel()} : in;
  launch<T, T>(phi_name, op, fn, ctx, {&flat}, Shape{x.numel()}, out, attrs, 3, calls, &paddle);
}

/* argmax, argmin: int64 indices (hwadapter's); flatten (or a 0-d x) passes no axis: the flattened tensor's. */
template <typename T>
void arg(const char *phi_name, const char *op, HwaKernelFn fn, const phi::CustomContext &ctx,
         const phi::DenseTensor &x, const phi::Scalar &axis, bool keepdims, bool flatten, phi::DataType dtype,
         phi::DenseTensor *out, std::atomic<uint64_t> &calls) {
  if (dtype != phi::DataType::INT64 && dtype != phi::DataType::UNDEFINED)
    refuse(phi_name, ctx, "indices of dtype " + phi::DataTypeToString(dtype) + " (hwadapter's " + op +
                              " gives int64: cast its result)");
  Shape in = shape_of(x), shape;
  const int64_t rank = (int64_t)in.size(), span = std::max<int64_t>(rank, 1), a = axis.to<int64_t>();
  if (x.numel() == 0) bad_argument(phi_name, "an empty tensor has no " + std::string(op));
  const bool all = flatten || rank == 0;
  if (!all && (a < -span || a >= span))
    bad_argument(phi_name, "axis " + std::to_string(a) + " is out of range for a " + std::to_string(rank) +
                               "-d tensor");
  const int64_t d = a < 0 ? a + rank : a;
  for (int64_t i = 0; i < rank; ++i)
    if (all ? keepdims : i != d || keepdims) shape.push_back(all || i == d ? 1 : in[i]);
  HwaAttr attrs[2] = {int_attr("keepdim", keepdims), int_attr("axis", d)};
  launch<T, int64_t>(phi_name, op, fn, ctx, {&x}, shape, out, attrs, all ? 1 : 2, calls);
}

/* where: condition (bool), x, y broadcast as numpy does. */
template <typename T>
void where(const char *phi_name, const char *op, HwaKernelFn fn, const phi::CustomContext &ctx,
           const phi::DenseTensor &condition, const phi::DenseTensor &x, const phi::DenseTensor &y,
           phi::DenseTensor *out, std::atomic<uint64_t> &calls) {
  const phi::DataType t = phi::CppTypeToDataType<T>::Type(), dtypes[3] = {phi::DataType::BOOL, t, t};
  Shape shape = broadcast(phi_name, broadcast(phi_name, shape_of(condition), shape_of(x)), shape_of(y));
  launch<T, T>(phi_name, op, fn, ctx, {&condition, &x, &y}, shape, out, nullptr, 0, calls, nullptr, dtypes);
}

/* gather: an int64 index of 0 or 1 dims ([n, 1] as [n], as Paddle's GatherInferMeta); the axis non-negative. */
template <typename T>
void gather(const char *phi_name, const char *op, HwaKernelFn fn, const phi::CustomContext &ctx,
            const phi::DenseTensor &x, const phi::DenseTensor &index, const phi::Scalar &axis, phi::DenseTensor *out,
            std::atomic<uint64_t> &calls) {
  if (index.dtype() != phi::DataType::INT64)
    refuse(phi_name, ctx, "an index of dtype " + phi::DataTypeToString(index.dtype()) +
                              " (hwadapter's gather takes int64: cast the index)");
  Shape in = shape_of(x), idx = shape_of(index);
  const int64_t rank = (int64_t)in.size(), a = axis.to<int64_t>();
  if (rank == 0 || a < -rank || a >= rank)
    bad_argument(phi_name, "axis " + std::to_string(a) + " is out of range for a " + std::to_string(rank) +
                               "-d tensor");
  if (idx.size() > 2 || (idx.size() == 2 && idx[1] != 1))
    bad_argument(phi_name, "the index must have 0 or 1 dimensions (or the shape [n, 1])");
  const int64_t d = a < 0 ? a + rank : a;
  Shape shape(in.begin(), in.begin() + d);
  if (!idx.empty()) shape.push_back(idx[0]);
  shape.insert(shape.end(), in.begin() + d + 1, in.end());
  const phi::DataType dtypes[2] = {phi::CppTypeToDataType<T>::Type(), phi::DataType::INT64};
  HwaAttr attrs[1] = {int_attr("axis", d)};
  phi::DenseTensor flat = idx.size() == 2 ? as_1d(phi_name, ctx, index) : index;
  launch<T, T>(phi_name, op, fn, ctx, {&x, &flat}, shape, out, attrs, 1, calls, nullptr, dtypes);
}

/* concat (the Python-kernel path only: optable.plan never registers it for a C library, whose kernels take a fixed
 * number of inputs): any number of inputs of one rank that agree off the axis; the axis made non-negative. */
template <typename T>
void concat(const char *phi_name, const char *op, HwaKernelFn fn, const phi::CustomContext &ctx,
            const std::vector<const phi::DenseTensor *> &xs, const phi::Scalar &axis, phi::DenseTensor *out,
            std::atomic<uint64_t> &calls) {
  if (xs.empty()) bad_argument(phi_name, "no tensors to join");
  Shape shape = shape_of(*xs[0]);
  const int64_t rank = (int64_t)shape.size(), a = axis.to<int64_t>();
  if (rank == 0 || a < -rank || a >= rank)
    bad_argument(phi_name, "axis " + std::to_string(a) + " is out of range for " + std::to_string(rank) +
                               "-d tensors (0-d tensors cannot be joined)");
  const int64_t d = a < 0 ? a + rank : a;
  shape[d] = 0;
  for (const phi::DenseTensor *x : xs) {
    Shape s = shape_of(*x);
    if ((int64_t)s.size() != rank) bad_argument(phi_name, "the tensors have different ranks");
    for (int64_t i = 0; i < rank; ++i)
      if (i != d && s[i] != shape[i]) bad_argument(phi_name, "the tensors' shapes differ off the axis");
    shape[d] += s[d];
  }
  HwaAttr attrs[1] = {int_attr("axis", d)};
  launch<T, T, std::vector<const phi::DenseTensor *>>(phi_name, op, fn, ctx, xs, shape, out, attrs, 1, calls);
}

/* split and split_with_num: the sections (one -1 inferred, as SplitInferMeta; or num equal ones) -> sections,
 * axis (non-negative); one output per section. */
template <typename T>
void split_parts(const char *phi_name, const char *op, HwaKernelFn fn, const phi::CustomContext &ctx,
                 const phi::DenseTensor &x, std::vector<int64_t> sections, int64_t num, const phi::Scalar &axis,
                 const std::vector<phi::DenseTensor *> &outs, std::atomic<uint64_t> &calls) {
  Shape in = shape_of(x);
  const int64_t rank = (int64_t)in.size(), a = axis.to<int64_t>();
  if (rank == 0 || a < -rank || a >= rank)
    bad_argument(phi_name, "axis " + std::to_string(a) + " is out of range for a " + std::to_string(rank) +
                               "-d tensor");
  const int64_t d = a < 0 ? a + rank : a;
  if (num > 0) {
    if (in[d] % num) bad_argument(phi_name, "the axis does not divide into " + std::to_string(num) + " sections");
    sections.assign(num, in[d] / num);
  }
  int64_t known = 0, unknown = -1;
  for (size_t i = 0; i < sections.size(); ++i) {
    if (sections[i] == -1 && unknown < 0) unknown = (int64_t)i;
    else if (sections[i] < 0) bad_argument(phi_name, "sections must be sizes, with at most one -1");
    else known += sections[i];
  }
  if (unknown >= 0) sections[unknown] = in[d] - known;
  if ((unknown >= 0 && known > in[d]) || (unknown < 0 && known != in[d]) || sections.size() != outs.size())
    bad_argument(phi_name, "the sections do not add up to the axis's size");
  std::vector<Shape> shapes(sections.size(), in);
  for (size_t i = 0; i < sections.size(); ++i) shapes[i][d] = sections[i];
  HwaAttr attrs[2] = {ints_attr("sections", sections), int_attr("axis", d)};
  launch_outs<T>(phi_name, op, fn, ctx, x, outs, shapes, attrs, 2, calls);
}

/* expand: Paddle's shape (-1 keeps an existing axis; new axes lead) resolved, as ExpandInferMeta does. */
template <typename T>
void expand_to(const char *phi_name, const char *op, HwaKernelFn fn, const phi::CustomContext &ctx,
               const phi::DenseTensor &x, const std::vector<int64_t> &shape, phi::DenseTensor *out,
               std::atomic<uint64_t> &calls) {
  Shape in = shape_of(x), to(shape.begin(), shape.end());
  const int64_t lead = (int64_t)to.size() - (int64_t)in.size();
  if (lead < 0) bad_argument(phi_name, "shape has fewer axes than x");
  for (int64_t i = 0; i < (int64_t)to.size(); ++i) {
    const int64_t have = i < lead ? 1 : in[i - lead];
    if (to[i] == -1 && i >= lead) to[i] = have;
    if (to[i] < 0 || (have != 1 && have != to[i]))
      bad_argument(phi_name, "cannot expand an axis of size " + std::to_string(have) + " to " +
                                 std::to_string(shape[i]) + " (-1 only keeps an existing axis)");
  }
  HwaAttr attrs[1] = {ints_attr("shape", to)};
  launch<T, T>(phi_name, op, fn, ctx, {&x}, to, out, attrs, 1, calls);
}

/* slice: Paddle's bounds (negative from the end, clamped: Python's rules with step 1) in hwadapter's normalised
 * form (an empty slice (0, 0, 1)); decrease_axis drops those axes of size 1 from what Paddle sees. */
template <typename T>
void slice_axes(const char *phi_name, const char *op, HwaKernelFn fn, const phi::CustomContext &ctx,
                const phi::DenseTensor &x, const std::vector<int64_t> &axes, const std::vector<int64_t> &starts,
                const std::vector<int64_t> &ends, const std::vector<int64_t> &decrease_axis, phi::DenseTensor *out,
                std::atomic<uint64_t> &calls) {
  Shape shape = shape_of(x);
  const int64_t rank = (int64_t)shape.size();
  if (axes.size() != starts.size() || axes.size() != ends.size())
    bad_argument(phi_name, "axes, starts and ends must have the same length");
  std::vector<int64_t> ax, lo, hi, step(axes.size(), 1);
  std::vector<bool> seen(rank, false);
  for (size_t i = 0; i < axes.size(); ++i) {
    const int64_t a = axes[i] < 0 ? axes[i] + rank : axes[i];
    if (a < 0 || a >= rank) bad_argument(phi_name, "axis " + std::to_string(axes[i]) + " is out of range");
    if (seen[a])
      refuse(phi_name, ctx, "axis " + std::to_string(a) + " sliced twice (hwadapter's slice takes each once)");
    seen[a] = true;
    const int64_t n = shape[a];
    int64_t s = starts[i] < 0 ? starts[i] + n : starts[i], e = ends[i] < 0 ? ends[i] + n : ends[i];
    s = std::min(std::max<int64_t>(s, 0), n), e = std::min(std::max<int64_t>(e, 0), n);
    if (e <= s) s = e = 0;
    ax.push_back(a), lo.push_back(s), hi.push_back(e);
    shape[a] = e - s;
  }
  Shape paddle;
  for (int64_t d = 0; d < rank; ++d) {
    bool drop = false;
    for (int64_t a : decrease_axis) drop = drop || (a < 0 ? a + rank : a) == d;
    if (drop && shape[d] != 1) bad_argument(phi_name, "decrease_axis names an axis whose slice is not of size 1");
    if (!drop) paddle.push_back(shape[d]);
  }
  HwaAttr attrs[4] = {ints_attr("axes", ax), ints_attr("starts", lo), ints_attr("ends", hi), ints_attr("steps", step)};
  launch<T, T>(phi_name, op, fn, ctx, {&x}, shape, out, attrs, 4, calls, paddle == shape ? nullptr : &paddle);
}

/* An index input must be int64 (hwadapter's index kernels take int64 only). */
void int64_index(const char *phi_name, const phi::CustomContext &ctx, const phi::DenseTensor &index, const char *op) {
  if (index.dtype() != phi::DataType::INT64)
    refuse(phi_name, ctx, "an index of dtype " + phi::DataTypeToString(index.dtype()) + " (hwadapter's " + op +
                              " takes int64: cast the index)");
}

/* The coordinates of gather_nd and scatter_nd_add: index's last axis (1..x's rank long); negative ones count from
 * the end in both. An empty last axis (Paddle: all of x for each) is refused. */
int64_t nd_depth(const char *phi_name, const phi::CustomContext &ctx, const Shape &in, const Shape &idx) {
  if (idx.empty()) bad_argument(phi_name, "the index must have at least one axis");
  if (idx.back() == 0)
    refuse(phi_name, ctx, "an index whose last axis is empty (hwadapter's takes 1 to rank coordinates)");
  if (idx.back() > (int64_t)in.size()) bad_argument(phi_name, "the index's last axis is longer than x's rank");
  return idx.back();
}

template <typename T>
void gather_nd(const char *phi_name, const char *op, HwaKernelFn fn, const phi::CustomContext &ctx,
               const phi::DenseTensor &x, const phi::DenseTensor &index, phi::DenseTensor *out,
               std::atomic<uint64_t> &calls) {
  int64_index(phi_name, ctx, index, op);
  Shape in = shape_of(x), idx = shape_of(index);
  const int64_t m = nd_depth(phi_name, ctx, in, idx);
  Shape shape(idx.begin(), idx.end() - 1);
  shape.insert(shape.end(), in.begin() + m, in.end());
  const phi::DataType dtypes[2] = {phi::CppTypeToDataType<T>::Type(), phi::DataType::INT64};
  HwaAttr attrs[1] = {int_attr("batch_dims", 0)};
  launch<T, T>(phi_name, op, fn, ctx, {&x, &index}, shape, out, attrs, 1, calls, nullptr, dtypes);
}

/* take_along_axis (gather_elements) and put_along_axis (scatter_elements): an index of x's rank, no larger than x
 * off the axis (the API broadcasts it before the kernel); the axis made non-negative. */
int64_t along_axis(const char *phi_name, const Shape &in, const Shape &idx, int axis) {
  const int64_t rank = (int64_t)in.size();
  if (rank == 0 || axis < -rank || axis >= rank)
    bad_argument(phi_name, "axis " + std::to_string(axis) + " is out of range for a " + std::to_string(rank) +
                               "-d tensor");
  const int64_t a = axis < 0 ? axis + rank : axis;
  if ((int64_t)idx.size() != rank) bad_argument(phi_name, "the index must have x's rank");
  for (int64_t d = 0; d < rank; ++d)
    if (d != a && idx[d] > in[d]) bad_argument(phi_name, "the index is larger than x off the axis");
  return a;
}

template <typename T>
void take_along_axis(const char *phi_name, const char *op, HwaKernelFn fn, const phi::CustomContext &ctx,
                     const phi::DenseTensor &x, const phi::DenseTensor &index, int axis, phi::DenseTensor *out,
                     std::atomic<uint64_t> &calls) {
  int64_index(phi_name, ctx, index, op);
  Shape idx = shape_of(index);
  HwaAttr attrs[1] = {int_attr("axis", along_axis(phi_name, shape_of(x), idx, axis))};
  const phi::DataType dtypes[2] = {phi::CppTypeToDataType<T>::Type(), phi::DataType::INT64};
  launch<T, T>(phi_name, op, fn, ctx, {&x, &index}, idx, out, attrs, 1, calls, nullptr, dtypes);
}

/* scatter_elements' reduction for Paddle's reduce; mean, and include_self=False with a reduction, refused. */
const char *reduction_of(const char *phi_name, const phi::CustomContext &ctx, const std::string &reduce,
                         bool include_self) {
  const char *r = reduce == "assign" ? "none" : reduce == "add" ? "add" : (reduce == "mul" || reduce == "multiply")
      ? "mul" : reduce == "amax" ? "max" : reduce == "amin" ? "min" : nullptr;
  if (!r) refuse(phi_name, ctx, "reduce='" + reduce + "' (hwadapter's scatter_elements has none, add, mul, max, min)");
  if (!include_self && reduce != "assign")
    refuse(phi_name, ctx, "include_self=False (hwadapter's scatter_elements combines with x's own values)");
  return r;
}

template <typename T>
void put_along_axis(const char *phi_name, const char *op, HwaKernelFn fn, const phi::CustomContext &ctx,
                    const phi::DenseTensor &x, const phi::DenseTensor &index, const phi::DenseTensor &value, int axis,
                    const std::string &reduce, bool include_self, phi::DenseTensor *out,
                    std::atomic<uint64_t> &calls) {
  int64_index(phi_name, ctx, index, op);
  Shape in = shape_of(x), idx = shape_of(index);
  const int64_t a = along_axis(phi_name, in, idx, axis);
  if (shape_of(value) != idx) bad_argument(phi_name, "values must have the index's shape");
  const char *reduction = reduction_of(phi_name, ctx, reduce, include_self);
  HwaAttr attrs[2] = {int_attr("axis", a), {"reduction", HWA_ATTR_STRING, 0, 0, nullptr, 0, reduction}};
  const phi::DataType t = phi::CppTypeToDataType<T>::Type(), dtypes[3] = {t, phi::DataType::INT64, t};
  launch<T, T>(phi_name, op, fn, ctx, {&x, &index, &value}, in, out, attrs, 2, calls, nullptr, dtypes);
}

/* scatter_nd_add: hwadapter's scatter_nd with reduction "add" (repeated coordinates add up in both). */
template <typename T>
void scatter_nd_add(const char *phi_name, const char *op, HwaKernelFn fn, const phi::CustomContext &ctx,
                    const phi::DenseTensor &x, const phi::DenseTensor &index, const phi::DenseTensor &updates,
                    phi::DenseTensor *out, std::atomic<uint64_t> &calls) {
  int64_index(phi_name, ctx, index, op);
  Shape in = shape_of(x), idx = shape_of(index);
  const int64_t m = nd_depth(phi_name, ctx, in, idx);
  Shape want(idx.begin(), idx.end() - 1);
  want.insert(want.end(), in.begin() + m, in.end());
  if (shape_of(updates) != want) bad_argument(phi_name, "updates must have the shape index.shape[:-1] + x.shape[m:]");
  HwaAttr attrs[1] = {{"reduction", HWA_ATTR_STRING, 0, 0, nullptr, 0, "add"}};
  const phi::DataType t = phi::CppTypeToDataType<T>::Type(), dtypes[3] = {t, phi::DataType::INT64, t};
  launch<T, T>(phi_name, op, fn, ctx, {&x, &index, &updates}, in, out, attrs, 1, calls, nullptr, dtypes);
}

/* pad (constant): Paddle's paddings (before, after for every axis from the first) flat, as hwadapter's pairs
 * travel through HwaAttr (pykernels pairs them again for the Python path); the value as x's dtype (Scalar::to<T>,
 * as Paddle's CPU reads it): a float attribute for floats, an int one for integers. A negative padding (a crop)
 * is refused. */
template <typename T>
void pad(const char *phi_name, const char *op, HwaKernelFn fn, const phi::CustomContext &ctx,
         const phi::DenseTensor &x, const std::vector<int> &paddings, const phi::Scalar &pad_value,
         phi::DenseTensor *out, std::atomic<uint64_t> &calls) {
  Shape shape = shape_of(x);
  if (paddings.size() != 2 * shape.size()) bad_argument(phi_name, "paddings must have 2 values for each axis of x");
  std::vector<int64_t> pads(paddings.begin(), paddings.end());
  for (size_t d = 0; d < shape.size(); ++d) {
    if (pads[2 * d] < 0 || pads[2 * d + 1] < 0) refuse(phi_name, ctx, "a negative padding (slice x to crop it)");
    shape[d] += pads[2 * d] + pads[2 * d + 1];
  }
  const T v = pad_value.to<T>();
  const HwaAttr value = std::is_floating_point<T>::value
                            ? HwaAttr{"value", HWA_ATTR_FLOAT, 0, (double)v, nullptr, 0, nullptr}
                            : int_attr("value", (int64_t)v);
  HwaAttr attrs[3] = {ints_attr("pads", pads), {"mode", HWA_ATTR_STRING, 0, 0, nullptr, 0, "constant"}, value};
  launch<T, T>(phi_name, op, fn, ctx, {&x}, shape, out, attrs, 3, calls);
}

/* conv2d_transpose: paddings and SAME/VALID as conv2d's (over x's plane); output_size given: the output_padding
 * it implies, within [0, stride) as Paddle's ConvTransposeInferMeta checks. NHWC refused. */
template <typename T>
void conv2d_transpose(const char *phi_name, const char *op, HwaKernelFn fn, const phi::CustomContext &ctx,
                      const phi::DenseTensor &input, const phi::DenseTensor &filter, const std::vector<int> &strides,
                      const std::vector<int> &paddings, const std::vector<int> &output_padding,
                      const std::vector<int64_t> &output_size, const std::string &padding_algorithm, int groups,
                      const std::vector<int> &dilations, const std::string &data_format, phi::DenseTensor *out,
                      std::atomic<uint64_t> &calls) {
  if (data_format == "NHWC") refuse(phi_name, ctx, "data_format NHWC (hwadapter's conv_transpose2d kernels take NCHW)");
  Shape x = shape_of(input), w = shape_of(filter);
  if (x.size() != 4 || w.size() != 4 || strides.size() != 2 || dilations.size() != 2) shape_error(phi_name, x, w);
  if (groups < 1 || x[1] != w[0] || x[1] % groups) shape_error(phi_name, x, w);
  std::vector<int64_t> stride(strides.begin(), strides.end()), dilation(dilations.begin(), dilations.end());
  if (padding_algorithm == "SAME") dilation = {1, 1};
  std::vector<int64_t> pad = paddings_of(phi_name, std::vector<int64_t>(paddings.begin(), paddings.end()),
                                         padding_algorithm, x, stride, {w[2], w[3]});
  std::vector<int64_t> extra = {0, 0};
  if (output_padding.size() == 2) extra = {output_padding[0], output_padding[1]};
  else if (!output_padding.empty()) bad_argument(phi_name, "output_padding must have 2 values");
  Shape shape = {x[0], w[1] * groups, 0, 0};
  for (int i = 0; i < 2; ++i) {
    if (stride[i] < 1 || dilation[i] < 1 || pad[2 * i] < 0 || pad[2 * i + 1] < 0)
      bad_argument(phi_name, "strides and dilations must be positive and paddings non-negative");
    const int64_t base = (x[2 + i] - 1) * stride[i] + (w[2 + i] - 1) * dilation[i] + 1 - pad[2 * i] - pad[2 * i + 1];
    if (output_size.size() == 2) extra[i] = output_size[i] - base;
    else if (!output_size.empty()) bad_argument(phi_name, "output_size must have 2 values");
    if (extra[i] < 0 || extra[i] >= std::max(stride[i], dilation[i]))
      bad_argument(phi_name, "the output size must lie within [" + std::to_string(base) + ", " +
                                 std::to_string(base + std::max(stride[i], dilation[i])) + ")");
    shape[2 + i] = base + extra[i];
    if (shape[2 + i] < 1) bad_argument(phi_name, "the paddings leave an empty output");
  }
  HwaAttr attrs[5] = {ints_attr("stride", stride), ints_attr("padding", pad), ints_attr("output_padding", extra),
                      ints_attr("dilation", dilation), int_attr("groups", groups)};
  launch<T, T>(phi_name, op, fn, ctx, {&input, &filter}, shape, out, attrs, 5, calls);
}

#ifndef HWA_PD_PYTHON
/* ---- contiguous: a strided view made dense with the library's copies (dtype-blind: bytes) ---- */
std::atomic<uint64_t> g_contiguous_calls{0};

template <typename T, typename Context>
void ContiguousKernel(const Context &ctx, const phi::DenseTensor &input, phi::DenseTensor *out) {
  g_contiguous_calls.fetch_add(1, std::memory_order_relaxed);
  const HwaDeviceInterface &t = api();
  phi::DenseTensorMeta meta = input.meta();
  meta.strides = meta.calc_strides(meta.dims);
  meta.offset = 0;
  out->set_meta(meta);
  T *dst = ctx.template Alloc<T>(out);
  int64_t n = input.numel();
  if (n == 0) return;
  int device = ctx.GetPlace().GetDeviceId();
  const char *src = static_cast<const char *>(input.data());
  int nd = input.dims().size();
  /* The span of the view's elements: strides may be 0 (expand) or, in principle, negative. */
  int64_t lo = 0, hi = 0;
  for (int d = 0; d < nd; ++d) {
    int64_t reach = (input.dims()[d] - 1) * input.strides()[d];
    (reach < 0 ? lo : hi) += reach;
  }
  /* Through the host: read the span once, gather on the host, write the result once. Synchronous copies are
   * ordered after the work queued on the device (device_api.h), so no stream is needed. */
  const size_t size = sizeof(T);
  std::vector<char> host_in((size_t)(hi - lo + 1) * size), host_out((size_t)n * size);
  int rc = t.memcpy_d2h(device, host_in.data(), src + lo * (int64_t)size, host_in.size());
  std::vector<int64_t> idx(nd, 0);
  int64_t off = -lo;
  for (int64_t i = 0; rc == HWA_OK && i < n; ++i) {
    memcpy(&host_out[(size_t)i * size], &host_in[(size_t)off * size], size);
    for (int d = nd - 1; d >= 0; --d) {
      if (++idx[d] < input.dims()[d]) {
        off += input.strides()[d];
        break;
      }
      off -= input.strides()[d] * (input.dims()[d] - 1);
      idx[d] = 0;
    }
  }
  if (rc == HWA_OK) rc = t.memcpy_h2d(device, dst, host_out.data(), host_out.size());
  if (rc != HWA_OK)
    PADDLE_THROW(common::errors::External("hwadapter-paddle: %s kernel contiguous on device %d: a copy failed "
                                          "(%s)%s", HWA_PD_DEVICE_TYPE, device, status_name(rc),
                                          library_message().c_str()));
}


/* ---- uniform, gaussian: Paddle's CPU kernels' draws (the same engine, distribution and order) from this device's
 * generator, which paddle.seed seeds as the CPU's, made on the host and copied in once: a model initialised on the
 * device equals one initialised on the CPU. ---- */
std::atomic<uint64_t> g_uniform_calls{0}, g_gaussian_calls{0};

std::shared_ptr<std::mt19937_64> engine_of(const phi::CustomContext &ctx, int seed) {
  if (!seed) return ctx.GetGenerator()->GetCPUEngine();
  auto engine = std::make_shared<std::mt19937_64>();
  engine->seed(seed);
  return engine;
}

template <typename T>
void copy_in(const char *phi_name, const phi::CustomContext &ctx, phi::DenseTensor *out, const std::vector<T> &host) {
  T *dst = ctx.template Alloc<T>(out);
  if (host.empty()) return;
  int device = ctx.GetPlace().GetDeviceId();
  int rc = api().memcpy_h2d(device, dst, host.data(), host.size() * sizeof(T));
  if (rc != HWA_OK)
    PADDLE_THROW(common::errors::External("hwadapter-paddle: %s kernel %s on device %d: the copy in failed (%s)%s",
                                          HWA_PD_DEVICE_TYPE, phi_name, device, status_name(rc),
                                          library_message().c_str()));
}

template <typename T, typename Context>
void UniformKernel(const Context &ctx, const phi::IntArray &shape, phi::DataType, const phi::Scalar &min,
                   const phi::Scalar &max, int seed, phi::DenseTensor *out) {
  g_uniform_calls.fetch_add(1, std::memory_order_relaxed);
  out->Resize(common::make_ddim(shape.GetData()));
  std::vector<T> host((size_t)out->numel());
  phi::UniformRealDistribution<T>(host.data(), (int64_t)host.size(), min.to<float>(), max.to<float>(),
                                         engine_of(ctx, seed));
  copy_in("uniform", ctx, out, host);
}

template <typename T, typename Context>
void GaussianKernel(const Context &ctx, const phi::IntArray &shape, float mean, float std, int seed, phi::DataType,
                    phi::DenseTensor *out) {
  g_gaussian_calls.fetch_add(1, std::memory_order_relaxed);
  out->Resize(common::make_ddim(shape.GetData()));
  std::vector<T> host((size_t)out->numel());
  std::normal_distribution<T> dist(mean, std);
  auto engine = engine_of(ctx, seed);
  for (T &v : host) v = dist(*engine);
  copy_in("gaussian", ctx, out, host);
}
#endif
}  // namespace hwa_pd

/* The generated part: one wrapper and one PD_REGISTER_PLUGIN_KERNEL per phi kernel, and the table of counters. */
#include "hwa_kernels.inc"

#ifndef HWA_PD_PYTHON
PD_REGISTER_PLUGIN_KERNEL(contiguous, HWA_PD_TYPE_TOKEN, ALL_LAYOUT, hwa_pd::ContiguousKernel, bool, uint8_t, int8_t,
                          int16_t, int32_t, int64_t, phi::dtype::float16, phi::dtype::bfloat16, float, double,
                          phi::dtype::complex<float>, phi::dtype::complex<double>) {}
PD_REGISTER_PLUGIN_KERNEL(uniform, HWA_PD_TYPE_TOKEN, ALL_LAYOUT, hwa_pd::UniformKernel, float, double) {}
PD_REGISTER_PLUGIN_KERNEL(gaussian, HWA_PD_TYPE_TOKEN, ALL_LAYOUT, hwa_pd::GaussianKernel, float, double) {}
#endif

extern "C" {

/* For `hwadapter paddle status` and the tests: what this library registers (no Paddle call needed to read it). */
__attribute__((visibility("default"))) const char *hwadapter_paddle_kernels_info(void) {
  return "device_type=" HWA_PD_DEVICE_TYPE ";library=" HWA_PD_LIBRARY ";built_for=" HWA_PD_BUILT_FOR
         ";kernels=" HWA_PD_REGISTERED
#ifndef HWA_PD_PYTHON
         ",contiguous:all,uniform:float32|float64,gaussian:float32|float64"
#endif
      ;
}

/* How often the phi kernel `phi_name` ran in this process (proof that Paddle dispatched to it); -1 if unknown. */
__attribute__((visibility("default"))) long long hwadapter_paddle_kernel_calls(const char *phi_name) {
#ifndef HWA_PD_PYTHON
  if (!strcmp(phi_name, "contiguous")) return (long long)hwa_pd::g_contiguous_calls.load();
  if (!strcmp(phi_name, "uniform")) return (long long)hwa_pd::g_uniform_calls.load();
  if (!strcmp(phi_name, "gaussian")) return (long long)hwa_pd::g_gaussian_calls.load();
#endif
  for (const hwa_pd::Counter *c = hwa_pd::counters; c->name; ++c)
    if (!strcmp(c->name, phi_name)) return (long long)c->calls->load();
  return -1;
}

/* Every phi kernel's calls in this process, "phi=calls;..." (those that ran; contiguous included): what
 * `hwadapter paddle trace` reads at the end of a run. The text lives until the next call. */
__attribute__((visibility("default"))) const char *hwadapter_paddle_kernel_counts(void) {
  static std::mutex lock;
  static std::string text;
  std::lock_guard<std::mutex> hold(lock);
  text.clear();
#ifndef HWA_PD_PYTHON
  if (uint64_t n = hwa_pd::g_contiguous_calls.load()) text += "contiguous=" + std::to_string(n) + ";";
  if (uint64_t n = hwa_pd::g_uniform_calls.load()) text += "uniform=" + std::to_string(n) + ";";
  if (uint64_t n = hwa_pd::g_gaussian_calls.load()) text += "gaussian=" + std::to_string(n) + ";";
#endif
  for (const hwa_pd::Counter *c = hwa_pd::counters; c->name; ++c)
    if (uint64_t n = c->calls->load()) text += std::string(c->name) + "=" + std::to_string(n) + ";";
  return text.c_str();
}

}  // extern "C"

// hwadapter._native: loads a vendor's C device library (device_api.h), checks it, and exposes it to Python.
#include <dlfcn.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "hwadapter/device_api.h"

namespace py = pybind11;

namespace {

// A failed call into the library: translated to hwadapter.api.errors by status (see the translator below).
struct NativeFailure {
  int status;
  std::string message;
  bool in_kernel = false;  // a kernel's own failure is a KernelExecutionError
  bool in_comm = false;    // a communication function's failure is a CollectiveError (bad arguments stay so)
};

// Fields up to and including `memory_info` (the 1.0 table) must be present for a table to be usable.
constexpr size_t kMinStructSize = offsetof(HwaDeviceInterface, memory_info) + sizeof(void *);
constexpr size_t kMaxInputs = 64;
constexpr size_t kMaxUniqueId = 4096;  // bytes of a communicator's unique id (device_api.h)
constexpr int kKnownDTypes[] = {HWA_BOOL,  HWA_UINT8, HWA_UINT16,  HWA_UINT32,  HWA_UINT64, HWA_INT8,
                                HWA_INT16, HWA_INT32, HWA_INT64, HWA_FLOAT16, HWA_FLOAT32, HWA_FLOAT64};

bool known_dtype(int32_t d) {
  for (int k : kKnownDTypes)
    if (k == d) return true;
  return false;
}

// One tensor descriptor with the storage its shape and strides point into.
struct TensorArg {
  HwaTensor t{};
  std::vector<int64_t> shape, strides;
};

std::vector<TensorArg> tensor_args(const py::list &items) {
  // items: (pointer or None, shape tuple, dtype code) per tensor; C-contiguous element strides
  std::vector<TensorArg> out(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    auto item = items[i].cast<py::tuple>();
    TensorArg &a = out[i];
    a.shape = item[1].cast<std::vector<int64_t>>();
    a.strides.assign(a.shape.size(), 1);
    for (size_t d = a.shape.size(); d-- > 1;) a.strides[d - 1] = a.strides[d] * a.shape[d];
    a.t.data = item[0].is_none() ? nullptr : reinterpret_cast<void *>(item[0].cast<uintptr_t>());
    a.t.dtype = item[2].cast<int32_t>();
    a.t.ndim = static_cast<int32_t>(a.shape.size());
  }
  for (auto &a : out) {  // after the vector stops moving
    a.t.shape = a.shape.data();
    a.t.strides = a.strides.data();
  }
  return out;
}

class NativeDevice {
 public:
  explicit NativeDevice(const std::string &path) : path_(path) {
    handle_ = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle_) throw std::runtime_error("cannot load " + path + ": " + dlerror());
    auto get = reinterpret_cast<HwaGetDeviceInterfaceFn>(dlsym(handle_, HWA_GET_DEVICE_INTERFACE));
    if (!get) fail(std::string("does not export ") + HWA_GET_DEVICE_INTERFACE);
    const HwaDeviceInterface *api = get();
    if (!api) fail("returned no device interface");
    if (api->api_major != HWA_API_MAJOR || api->api_minor > HWA_API_MINOR)
      fail("implements device API " + std::to_string(api->api_major) + "." + std::to_string(api->api_minor) +
           ", this hwadapter provides " + std::to_string(HWA_API_MAJOR) + "." + std::to_string(HWA_API_MINOR) +
           " (a library is accepted with the same major version and a minor version up to this one): rebuild it " +
           "against hwadapter's device_api.h, or install the hwadapter it was built for");
    if (api->struct_size < kMinStructSize)
      fail("device interface struct is too small (" + std::to_string(api->struct_size) + " bytes, version 1.0 has " +
           std::to_string(kMinStructSize) + "): set struct_size = sizeof(HwaDeviceInterface)");
    // A copy with every field past the library's struct_size zeroed: fields a library's header did not have are absent.
    std::memset(&t_, 0, sizeof t_);
    std::memcpy(&t_, api, api->struct_size < sizeof t_ ? api->struct_size : sizeof t_);
    t_.struct_size = api->struct_size;
    check_functions();
    check_kernels();
    if (t_.initialize) {
      int rc = t_.initialize();
      if (rc != HWA_OK) fail("initialize failed with status " + std::to_string(rc) + last_error_suffix());
    }
    initialized_ = true;
  }
  ~NativeDevice() {
    if (initialized_ && t_.finalize) t_.finalize();
    if (handle_) dlclose(handle_);
  }
  NativeDevice(const NativeDevice &) = delete;
  NativeDevice &operator=(const NativeDevice &) = delete;

  std::string device_type() const { return t_.device_type ? t_.device_type : ""; }
  py::tuple api_version() const { return py::make_tuple(t_.api_major, t_.api_minor); }
  size_t struct_size() const { return t_.struct_size; }
  bool has_streams() const { return t_.stream_create != nullptr; }
  bool has_properties() const { return t_.get_properties != nullptr; }
  bool has_current_device() const { return t_.set_device && t_.get_device; }
  bool has_collectives() const { return t_.comm_init_rank != nullptr; }
  // Which communication functions the library has (the six required ones are all there when has_collectives).
  py::dict comm_functions() const {
    py::dict d;
    for (auto &f : comm_table()) d[f.name] = f.fn != nullptr;
    return d;
  }
  py::dict async_copies() const {
    py::dict d;
    d["h2d"] = t_.memcpy_h2d_async != nullptr;
    d["d2h"] = t_.memcpy_d2h_async != nullptr;
    d["d2d"] = t_.memcpy_d2d_async != nullptr;
    d["memset"] = t_.memset_async != nullptr;
    return d;
  }

  int device_count() {
    int n = 0;
    call(t_.device_count(&n), "device_count");
    return n;
  }
  uintptr_t allocate(int dev, size_t nbytes) {
    void *ptr = nullptr;
    int rc;
    {
      py::gil_scoped_release release;
      rc = t_.allocate(dev, nbytes, &ptr);
      if (rc != HWA_OK) throw failure(rc, "allocate of " + std::to_string(nbytes) + " bytes on device " + std::to_string(dev));
    }
    return reinterpret_cast<uintptr_t>(ptr);
  }
  void deallocate(int dev, uintptr_t ptr) {
    py::gil_scoped_release release;
    call(t_.deallocate(dev, reinterpret_cast<void *>(ptr)), "deallocate");
  }
  void copy_h2d(int dev, uintptr_t dst, py::buffer src, uintptr_t stream) {
    py::buffer_info info = src.request();
    size_t n = static_cast<size_t>(info.size * info.itemsize);
    py::gil_scoped_release release;
    if (stream && t_.memcpy_h2d_async)
      call(t_.memcpy_h2d_async(dev, as_stream(stream), ptr(dst), info.ptr, n), "memcpy_h2d_async");
    else
      call(t_.memcpy_h2d(dev, ptr(dst), info.ptr, n), "memcpy_h2d");
  }
  void copy_d2h(int dev, py::buffer dst, uintptr_t src, uintptr_t stream) {
    py::buffer_info info = dst.request(true);
    size_t n = static_cast<size_t>(info.size * info.itemsize);
    py::gil_scoped_release release;
    if (stream && t_.memcpy_d2h_async)
      call(t_.memcpy_d2h_async(dev, as_stream(stream), info.ptr, ptr(src), n), "memcpy_d2h_async");
    else
      call(t_.memcpy_d2h(dev, info.ptr, ptr(src), n), "memcpy_d2h");
  }
  void copy_d2d(int dev, uintptr_t dst, uintptr_t src, size_t nbytes, uintptr_t stream) {
    py::gil_scoped_release release;
    if (stream && t_.memcpy_d2d_async)
      call(t_.memcpy_d2d_async(dev, as_stream(stream), ptr(dst), ptr(src), nbytes), "memcpy_d2d_async");
    else
      call(t_.memcpy_d2d(dev, ptr(dst), ptr(src), nbytes), "memcpy_d2d");
  }
  void memset(int dev, uintptr_t dst, int value, size_t nbytes, uintptr_t stream) {
    py::gil_scoped_release release;
    if (stream && t_.memset_async)
      call(t_.memset_async(dev, as_stream(stream), ptr(dst), value, nbytes), "memset_async");
    else
      call(t_.memset(dev, ptr(dst), value, nbytes), "memset");
  }
  void synchronize(int dev) {
    py::gil_scoped_release release;
    call(t_.synchronize(dev), "synchronize");
  }
  py::tuple memory_info(int dev) {
    size_t free_b = 0, total_b = 0;
    if (t_.memory_info) {
      py::gil_scoped_release release;
      call(t_.memory_info(dev, &free_b, &total_b), "memory_info");
    }
    return py::make_tuple(free_b, total_b);
  }
  py::object properties(int dev) {
    if (!t_.get_properties) return py::none();
    HwaDeviceProperties p;
    std::memset(&p, 0, sizeof p);
    p.struct_size = sizeof p;
    call(t_.get_properties(dev, &p), "get_properties");
    p.name[sizeof p.name - 1] = p.vendor[sizeof p.vendor - 1] = p.driver_version[sizeof p.driver_version - 1] = 0;
    py::dict d;
    d["name"] = std::string(p.name);
    d["vendor"] = std::string(p.vendor);
    d["driver_version"] = std::string(p.driver_version);
    d["total_memory"] = p.total_memory;
    d["compute_units"] = p.compute_units;
    d["max_work_group_size"] = p.max_work_group_size;
    d["alignment"] = p.alignment;
    return d;
  }
  void set_device(int dev) {
    need(t_.set_device != nullptr, "set_device");
    call(t_.set_device(dev), "set_device");
  }
  int get_device() {
    need(t_.get_device != nullptr, "get_device");
    int dev = -1;
    call(t_.get_device(&dev), "get_device");
    return dev;
  }

  // Streams and events, as integers (the library's handles); present only when has_streams.
  uintptr_t stream_create(int dev) { return create(t_.stream_create, dev, "stream_create"); }
  void stream_destroy(int dev, uintptr_t s) { call(t_.stream_destroy(dev, as_stream(s)), "stream_destroy"); }
  void stream_synchronize(int dev, uintptr_t s) {
    py::gil_scoped_release release;
    call(t_.stream_synchronize(dev, as_stream(s)), "stream_synchronize");
  }
  bool stream_query(int dev, uintptr_t s) { return ready(t_.stream_query(dev, as_stream(s)), "stream_query"); }
  void stream_wait_event(int dev, uintptr_t s, uintptr_t e) {
    call(t_.stream_wait_event(dev, as_stream(s), as_event(e)), "stream_wait_event");
  }
  uintptr_t event_create(int dev) { return create(t_.event_create, dev, "event_create"); }
  void event_destroy(int dev, uintptr_t e) { call(t_.event_destroy(dev, as_event(e)), "event_destroy"); }
  void event_record(int dev, uintptr_t e, uintptr_t s) { call(t_.event_record(dev, as_event(e), as_stream(s)), "event_record"); }
  bool event_query(int dev, uintptr_t e) { return ready(t_.event_query(dev, as_event(e)), "event_query"); }
  void event_synchronize(int dev, uintptr_t e) {
    py::gil_scoped_release release;
    call(t_.event_synchronize(dev, as_event(e)), "event_synchronize");
  }

  // Communicators (1.2), as integers (the library's HwaComm handles); buffers are device addresses.
  py::bytes comm_unique_id() {
    need_comm(t_.comm_unique_id, "comm_unique_id");
    size_t n = 0;
    comm_call(t_.comm_unique_id_size(&n), "comm_unique_id_size");
    if (n == 0 || n > kMaxUniqueId)
      throw comm_failure(HWA_ERROR, "comm_unique_id_size gave " + std::to_string(n) + " bytes (1 to " +
                                        std::to_string(kMaxUniqueId) + " allowed)");
    std::string id(n, '\0');
    {
      py::gil_scoped_release release;
      comm_call(t_.comm_unique_id(&id[0], n), "comm_unique_id");
    }
    return py::bytes(id);
  }
  uintptr_t comm_init_rank(int dev, const py::bytes &id, int nranks, int rank) {
    need_comm(t_.comm_init_rank, "comm_init_rank");
    std::string data = id;
    HwaComm comm = nullptr;
    {
      py::gil_scoped_release release;  // every rank of the group meets here: others must run meanwhile
      comm_call(t_.comm_init_rank(dev, data.data(), data.size(), nranks, rank, &comm), "comm_init_rank");
    }
    return reinterpret_cast<uintptr_t>(comm);
  }
  void comm_destroy(uintptr_t comm) {
    need_comm(t_.comm_destroy, "comm_destroy");
    py::gil_scoped_release release;
    comm_call(t_.comm_destroy(as_comm(comm)), "comm_destroy");
  }
  void all_reduce(uintptr_t send, uintptr_t recv, size_t count, int dtype, int op, uintptr_t comm, uintptr_t stream) {
    need_comm(t_.all_reduce, "all_reduce");
    py::gil_scoped_release release;
    comm_call(t_.all_reduce(ptr(send), ptr(recv), count, HwaDType(dtype), HwaReduceOp(op), as_comm(comm),
                            as_stream(stream)), "all_reduce");
  }
  void broadcast(uintptr_t buf, size_t count, int dtype, int root, uintptr_t comm, uintptr_t stream) {
    need_comm(t_.broadcast, "broadcast");
    py::gil_scoped_release release;
    comm_call(t_.broadcast(ptr(buf), count, HwaDType(dtype), root, as_comm(comm), as_stream(stream)), "broadcast");
  }
  void reduce(uintptr_t send, uintptr_t recv, size_t count, int dtype, int op, int root, uintptr_t comm,
              uintptr_t stream) {
    need_comm(t_.reduce, "reduce");
    py::gil_scoped_release release;
    comm_call(t_.reduce(ptr(send), ptr(recv), count, HwaDType(dtype), HwaReduceOp(op), root, as_comm(comm),
                        as_stream(stream)), "reduce");
  }
  void all_gather(uintptr_t send, uintptr_t recv, size_t count, int dtype, uintptr_t comm, uintptr_t stream) {
    need_comm(t_.all_gather, "all_gather");
    py::gil_scoped_release release;
    comm_call(t_.all_gather(ptr(send), ptr(recv), count, HwaDType(dtype), as_comm(comm), as_stream(stream)),
              "all_gather");
  }
  void reduce_scatter(uintptr_t send, uintptr_t recv, size_t recv_count, int dtype, int op, uintptr_t comm,
                      uintptr_t stream) {
    need_comm(t_.reduce_scatter, "reduce_scatter");
    py::gil_scoped_release release;
    comm_call(t_.reduce_scatter(ptr(send), ptr(recv), recv_count, HwaDType(dtype), HwaReduceOp(op), as_comm(comm),
                                as_stream(stream)), "reduce_scatter");
  }
  void all_to_all(uintptr_t send, uintptr_t recv, size_t count, int dtype, uintptr_t comm, uintptr_t stream) {
    need_comm(t_.all_to_all, "all_to_all");
    py::gil_scoped_release release;
    comm_call(t_.all_to_all(ptr(send), ptr(recv), count, HwaDType(dtype), as_comm(comm), as_stream(stream)),
              "all_to_all");
  }
  void send(uintptr_t buf, size_t count, int dtype, int peer, uintptr_t comm, uintptr_t stream) {
    need_comm(t_.send, "send");
    py::gil_scoped_release release;
    comm_call(t_.send(ptr(buf), count, HwaDType(dtype), peer, as_comm(comm), as_stream(stream)), "send");
  }
  void recv(uintptr_t buf, size_t count, int dtype, int peer, uintptr_t comm, uintptr_t stream) {
    need_comm(t_.recv, "recv");
    py::gil_scoped_release release;
    comm_call(t_.recv(ptr(buf), count, HwaDType(dtype), peer, as_comm(comm), as_stream(stream)), "recv");
  }
  void group_start() {
    need_comm(t_.group_start, "group_start");
    comm_call(t_.group_start(), "group_start");
  }
  void group_end() {
    need_comm(t_.group_end, "group_end");
    py::gil_scoped_release release;  // the fused calls run here
    comm_call(t_.group_end(), "group_end");
  }

  // The library's kernels: (index, op, input dtype codes) each.
  py::list kernels() const {
    py::list out;
    for (size_t k = 0; k < t_.num_kernels; ++k) {
      const HwaKernelDef &def = t_.kernels[k];
      py::tuple dtypes(def.num_inputs);
      for (size_t i = 0; i < def.num_inputs; ++i) dtypes[i] = def.input_dtypes[i];
      out.append(py::make_tuple(k, std::string(def.op), dtypes));
    }
    return out;
  }
  // Runs kernel k; inputs/outputs are (pointer or None, shape, dtype code); attrs are (name, HwaAttrType, value).
  void call_kernel(size_t k, int dev, uintptr_t stream, const py::list &inputs, const py::list &outputs,
                   const py::list &attrs) {
    if (k >= t_.num_kernels) throw failure(HWA_INVALID_ARGUMENT, "kernel index " + std::to_string(k) + " out of range");
    std::vector<TensorArg> ins = tensor_args(inputs), outs = tensor_args(outputs);
    std::vector<HwaTensor> in_t, out_t;
    for (auto &a : ins) in_t.push_back(a.t);
    for (auto &a : outs) out_t.push_back(a.t);
    std::vector<std::string> names(attrs.size()), strings(attrs.size());
    std::vector<std::vector<int64_t>> lists(attrs.size());
    std::vector<HwaAttr> at(attrs.size());
    for (size_t i = 0; i < attrs.size(); ++i) {
      auto item = attrs[i].cast<py::tuple>();
      names[i] = item[0].cast<std::string>();
      HwaAttr &a = at[i];
      std::memset(&a, 0, sizeof a);
      a.type = item[1].cast<int32_t>();
      if (a.type == HWA_ATTR_INT) a.i = item[2].cast<int64_t>();
      else if (a.type == HWA_ATTR_FLOAT) a.f = item[2].cast<double>();
      else if (a.type == HWA_ATTR_INTS) lists[i] = item[2].cast<std::vector<int64_t>>();
      else if (a.type == HWA_ATTR_STRING) strings[i] = item[2].cast<std::string>();
      else throw failure(HWA_INVALID_ARGUMENT, "attribute " + names[i] + " has unknown type " + std::to_string(a.type));
    }
    for (size_t i = 0; i < at.size(); ++i) {  // pointers into the vectors once they are filled
      at[i].name = names[i].c_str();
      at[i].ints = lists[i].data();
      at[i].count = lists[i].size();
      at[i].s = strings[i].c_str();
    }
    const HwaKernelDef &def = t_.kernels[k];
    py::gil_scoped_release release;
    int rc = def.fn(dev, as_stream(stream), in_t.data(), in_t.size(), out_t.data(), out_t.size(), at.data(), at.size());
    if (rc != HWA_OK) {
      NativeFailure f = failure(rc, std::string("kernel for ") + def.op);
      f.in_kernel = true;
      throw f;
    }
  }

 private:
  static void *ptr(uintptr_t p) { return reinterpret_cast<void *>(p); }
  static HwaStream as_stream(uintptr_t s) { return reinterpret_cast<HwaStream>(s); }
  static HwaEvent as_event(uintptr_t e) { return reinterpret_cast<HwaEvent>(e); }
  static HwaComm as_comm(uintptr_t c) { return reinterpret_cast<HwaComm>(c); }
  struct Named {
    const char *name;
    const void *fn;
  };
  // The communication functions: the first six are required of a library that has any.
  static constexpr size_t kRequiredComm = 6;
  std::vector<Named> comm_table() const {
    return {{"comm_unique_id_size", (void *)t_.comm_unique_id_size}, {"comm_unique_id", (void *)t_.comm_unique_id},
            {"comm_init_rank", (void *)t_.comm_init_rank},           {"comm_destroy", (void *)t_.comm_destroy},
            {"all_reduce", (void *)t_.all_reduce},                   {"broadcast", (void *)t_.broadcast},
            {"reduce", (void *)t_.reduce},                           {"all_gather", (void *)t_.all_gather},
            {"reduce_scatter", (void *)t_.reduce_scatter},           {"all_to_all", (void *)t_.all_to_all},
            {"send", (void *)t_.send},                               {"recv", (void *)t_.recv},
            {"group_start", (void *)t_.group_start},                 {"group_end", (void *)t_.group_end}};
  }
  // stream_create / event_create: fn(dev, &handle), the handle as an integer.
  template <class Handle>
  uintptr_t create(int (*fn)(int, Handle *), int dev, const char *what) {
    need(fn != nullptr, what);
    Handle h = nullptr;
    call(fn(dev, &h), what);
    return reinterpret_cast<uintptr_t>(h);
  }

  void check_functions() {
    const Named required[] = {{"device_count", (void *)t_.device_count}, {"allocate", (void *)t_.allocate},
                              {"deallocate", (void *)t_.deallocate},     {"memcpy_h2d", (void *)t_.memcpy_h2d},
                              {"memcpy_d2h", (void *)t_.memcpy_d2h},     {"memcpy_d2d", (void *)t_.memcpy_d2d},
                              {"memset", (void *)t_.memset},             {"synchronize", (void *)t_.synchronize}};
    for (auto &r : required)
      if (!r.fn) fail(std::string("leaves the required function ") + r.name + " empty: set it in the table");
    const Named streams[] = {{"stream_create", (void *)t_.stream_create},   {"stream_destroy", (void *)t_.stream_destroy},
                             {"stream_synchronize", (void *)t_.stream_synchronize}, {"stream_query", (void *)t_.stream_query},
                             {"stream_wait_event", (void *)t_.stream_wait_event}, {"event_create", (void *)t_.event_create},
                             {"event_destroy", (void *)t_.event_destroy},   {"event_record", (void *)t_.event_record},
                             {"event_query", (void *)t_.event_query},       {"event_synchronize", (void *)t_.event_synchronize}};
    std::string have, missing;
    for (auto &s : streams) (s.fn ? have : missing) += std::string(s.name) + " ";
    if (!have.empty() && !missing.empty())
      fail("implements some stream and event functions but leaves " + missing +
           "empty: streams and events are all ten functions or none");
    check_comm_functions();
  }
  void check_comm_functions() {
    std::vector<Named> comm = comm_table();
    std::string missing;
    bool any = false;
    for (size_t i = 0; i < comm.size(); ++i) {
      any = any || comm[i].fn;
      if (i < kRequiredComm && !comm[i].fn) missing += std::string(comm[i].name) + " ";
    }
    if (any && !missing.empty())
      fail("implements communication functions but leaves " + missing +
           "empty: a communicator needs comm_unique_id_size, comm_unique_id, comm_init_rank, comm_destroy, "
           "all_reduce and broadcast (the others are optional), or none of them for hwadapter's default one on MPI");
    if (!t_.group_start != !t_.group_end)
      fail(std::string("sets ") + (t_.group_start ? "group_start" : "group_end") + " but leaves " +
           (t_.group_start ? "group_end" : "group_start") + " empty: both or neither");
  }
  void check_kernels() {
    if (t_.num_kernels && !t_.kernels) fail("declares " + std::to_string(t_.num_kernels) + " kernels but kernels is NULL");
    for (size_t k = 0; k < t_.num_kernels; ++k) {
      const HwaKernelDef &def = t_.kernels[k];
      std::string which = "kernel " + std::to_string(k) + (def.op ? std::string(" (") + def.op + ")" : std::string());
      if (!def.op || !def.fn) fail(which + " has no op name or no function");
      if (def.num_inputs > kMaxInputs || (def.num_inputs && !def.input_dtypes))
        fail(which + " has " + std::to_string(def.num_inputs) + " inputs and input_dtypes " +
             (def.input_dtypes ? "set" : "NULL"));
      for (size_t i = 0; i < def.num_inputs; ++i)
        if (!known_dtype(def.input_dtypes[i]))
          fail(which + " input " + std::to_string(i) + " has unknown dtype code " + std::to_string(def.input_dtypes[i]) +
               " (use the HwaDType values of device_api.h)");
    }
  }
  [[noreturn]] void fail(const std::string &why) {
    if (handle_) dlclose(handle_);
    handle_ = nullptr;
    throw std::runtime_error(path_ + " " + why);
  }
  static void need(bool fn, const char *name) {
    if (!fn) throw NativeFailure{HWA_UNSUPPORTED, std::string("the library does not implement ") + name};
  }
  template <class Fn>
  void need_comm(Fn fn, const char *name) const {
    if (!fn) {
      NativeFailure f{HWA_UNSUPPORTED, device_type() + " (" + path_ + ") has no " + name +
                                           " in its communication functions (device_api.h 1.2)"};
      f.in_comm = true;
      throw f;
    }
  }
  NativeFailure comm_failure(int rc, const std::string &what) const {
    NativeFailure f = failure(rc, what);
    f.in_comm = true;
    return f;
  }
  void comm_call(int rc, const char *what) const {
    if (rc != HWA_OK) throw comm_failure(rc, what);
  }
  std::string last_error_suffix() const {
    const char *msg = t_.last_error ? t_.last_error() : nullptr;
    return msg && *msg ? std::string(": ") + msg : std::string();
  }
  // The error of a failed call, with the library's message (read on this thread, straight after the call).
  NativeFailure failure(int rc, const std::string &what) const {
    return {rc, device_type() + " (" + path_ + "): " + what + " failed with status " + std::to_string(rc) +
                    last_error_suffix()};
  }
  void call(int rc, const char *what) const {
    if (rc != HWA_OK) throw failure(rc, what);
  }
  bool ready(int rc, const char *what) const {
    if (rc == HWA_NOT_READY) return false;
    call(rc, what);
    return true;
  }
  std::string path_;
  void *handle_ = nullptr;
  bool initialized_ = false;
  HwaDeviceInterface t_;
};

}  // namespace

PYBIND11_MODULE(_native, m) {
  m.doc() = "Loads vendor C device libraries that implement hwadapter/device_api.h.";
  m.attr("API_VERSION") = py::make_tuple(HWA_API_MAJOR, HWA_API_MINOR);
  m.attr("STRUCT_SIZE") = sizeof(HwaDeviceInterface);
  m.attr("MIN_STRUCT_SIZE") = kMinStructSize;
  py::dict dtypes;
  dtypes["bool"] = int(HWA_BOOL);
  dtypes["uint8"] = int(HWA_UINT8);
  dtypes["uint16"] = int(HWA_UINT16);
  dtypes["uint32"] = int(HWA_UINT32);
  dtypes["uint64"] = int(HWA_UINT64);
  dtypes["int8"] = int(HWA_INT8);
  dtypes["int16"] = int(HWA_INT16);
  dtypes["int32"] = int(HWA_INT32);
  dtypes["int64"] = int(HWA_INT64);
  dtypes["float16"] = int(HWA_FLOAT16);
  dtypes["float32"] = int(HWA_FLOAT32);
  dtypes["float64"] = int(HWA_FLOAT64);
  m.attr("DTYPES") = dtypes;  // dtype name -> HwaDType
  m.attr("ATTR_INT") = int(HWA_ATTR_INT);
  m.attr("ATTR_FLOAT") = int(HWA_ATTR_FLOAT);
  m.attr("ATTR_INTS") = int(HWA_ATTR_INTS);
  m.attr("ATTR_STRING") = int(HWA_ATTR_STRING);
  py::dict reduce_ops;
  reduce_ops["sum"] = int(HWA_REDUCE_SUM);
  reduce_ops["avg"] = int(HWA_REDUCE_AVG);
  reduce_ops["max"] = int(HWA_REDUCE_MAX);
  reduce_ops["min"] = int(HWA_REDUCE_MIN);
  reduce_ops["prod"] = int(HWA_REDUCE_PROD);
  m.attr("REDUCE_OPS") = reduce_ops;  // reduce op name -> HwaReduceOp
  // A failed call becomes the hwadapter error its status stands for (imported when first needed: no cycle at load).
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const NativeFailure &f) {
      const char *name = f.status == HWA_OUT_OF_MEMORY      ? "OutOfMemoryError"
                         : f.status == HWA_INVALID_ARGUMENT ? "InvalidArgumentError"
                         : f.in_comm                        ? "CollectiveError"
                         : f.status == HWA_UNSUPPORTED      ? "KernelNotFoundError"
                         : f.in_kernel                      ? "KernelExecutionError"
                                                            : "HwAdapterError";
      py::object cls = py::module_::import("hwadapter.api.errors").attr(name);
      PyErr_SetString(cls.ptr(), f.message.c_str());
    }
  });
  py::class_<NativeDevice>(m, "NativeDevice")
      .def(py::init<const std::string &>(), py::arg("path"))
      .def_property_readonly("device_type", &NativeDevice::device_type)
      .def_property_readonly("api_version", &NativeDevice::api_version)
      .def_property_readonly("struct_size", &NativeDevice::struct_size)
      .def_property_readonly("has_streams", &NativeDevice::has_streams)
      .def_property_readonly("has_properties", &NativeDevice::has_properties)
      .def_property_readonly("has_current_device", &NativeDevice::has_current_device)
      .def_property_readonly("async_copies", &NativeDevice::async_copies)
      .def_property_readonly("has_collectives", &NativeDevice::has_collectives)
      .def_property_readonly("comm_functions", &NativeDevice::comm_functions)
      .def("device_count", &NativeDevice::device_count)
      .def("allocate", &NativeDevice::allocate)
      .def("deallocate", &NativeDevice::deallocate)
      .def("copy_h2d", &NativeDevice::copy_h2d, py::arg("dev"), py::arg("dst"), py::arg("src"), py::arg("stream") = 0)
      .def("copy_d2h", &NativeDevice::copy_d2h, py::arg("dev"), py::arg("dst"), py::arg("src"), py::arg("stream") = 0)
      .def("copy_d2d", &NativeDevice::copy_d2d, py::arg("dev"), py::arg("dst"), py::arg("src"), py::arg("nbytes"),
           py::arg("stream") = 0)
      .def("memset", &NativeDevice::memset, py::arg("dev"), py::arg("dst"), py::arg("value"), py::arg("nbytes"),
           py::arg("stream") = 0)
      .def("synchronize", &NativeDevice::synchronize)
      .def("memory_info", &NativeDevice::memory_info)
      .def("properties", &NativeDevice::properties)
      .def("set_device", &NativeDevice::set_device)
      .def("get_device", &NativeDevice::get_device)
      .def("stream_create", &NativeDevice::stream_create)
      .def("stream_destroy", &NativeDevice::stream_destroy)
      .def("stream_synchronize", &NativeDevice::stream_synchronize)
      .def("stream_query", &NativeDevice::stream_query)
      .def("stream_wait_event", &NativeDevice::stream_wait_event)
      .def("event_create", &NativeDevice::event_create)
      .def("event_destroy", &NativeDevice::event_destroy)
      .def("event_record", &NativeDevice::event_record)
      .def("event_query", &NativeDevice::event_query)
      .def("event_synchronize", &NativeDevice::event_synchronize)
      .def("comm_unique_id", &NativeDevice::comm_unique_id)
      .def("comm_init_rank", &NativeDevice::comm_init_rank, py::arg("dev"), py::arg("id"), py::arg("nranks"),
           py::arg("rank"))
      .def("comm_destroy", &NativeDevice::comm_destroy)
      .def("all_reduce", &NativeDevice::all_reduce, py::arg("send"), py::arg("recv"), py::arg("count"),
           py::arg("dtype"), py::arg("op"), py::arg("comm"), py::arg("stream") = 0)
      .def("broadcast", &NativeDevice::broadcast, py::arg("buf"), py::arg("count"), py::arg("dtype"), py::arg("root"),
           py::arg("comm"), py::arg("stream") = 0)
      .def("reduce", &NativeDevice::reduce, py::arg("send"), py::arg("recv"), py::arg("count"), py::arg("dtype"),
           py::arg("op"), py::arg("root"), py::arg("comm"), py::arg("stream") = 0)
      .def("all_gather", &NativeDevice::all_gather, py::arg("send"), py::arg("recv"), py::arg("count"),
           py::arg("dtype"), py::arg("comm"), py::arg("stream") = 0)
      .def("reduce_scatter", &NativeDevice::reduce_scatter, py::arg("send"), py::arg("recv"), py::arg("recv_count"),
           py::arg("dtype"), py::arg("op"), py::arg("comm"), py::arg("stream") = 0)
      .def("all_to_all", &NativeDevice::all_to_all, py::arg("send"), py::arg("recv"), py::arg("count"),
           py::arg("dtype"), py::arg("comm"), py::arg("stream") = 0)
      .def("send", &NativeDevice::send, py::arg("buf"), py::arg("count"), py::arg("dtype"), py::arg("peer"),
           py::arg("comm"), py::arg("stream") = 0)
      .def("recv", &NativeDevice::recv, py::arg("buf"), py::arg("count"), py::arg("dtype"), py::arg("peer"),
           py::arg("comm"), py::arg("stream") = 0)
      .def("group_start", &NativeDevice::group_start)
      .def("group_end", &NativeDevice::group_end)
      .def("kernels", &NativeDevice::kernels)
      .def("call_kernel", &NativeDevice::call_kernel);
}

// hwadapter._native: loads a vendor's C device library (device_api.h), checks it, and exposes it to Python.
#include <dlfcn.h>
#include <pybind11/pybind11.h>

#include <cstring>
#include <stdexcept>
#include <string>

#include "hwadapter/device_api.h"

namespace py = pybind11;

namespace {

struct OutOfMemory : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Fields up to and including `memory_info` must be present for a table to be usable.
constexpr size_t kMinStructSize = offsetof(HwaDeviceInterface, memory_info) + sizeof(void *);

class NativeDevice {
 public:
  explicit NativeDevice(const std::string &path) : path_(path) {
    handle_ = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle_) throw std::runtime_error("cannot load " + path + ": " + dlerror());
    auto get = reinterpret_cast<HwaGetDeviceInterfaceFn>(dlsym(handle_, HWA_GET_DEVICE_INTERFACE));
    if (!get) fail(std::string("does not export ") + HWA_GET_DEVICE_INTERFACE);
    api_ = get();
    if (!api_) fail("returned no device interface");
    if (api_->struct_size < kMinStructSize) fail("device interface struct is too small (built against an older header?)");
    if (api_->api_major != HWA_API_MAJOR || api_->api_minor > HWA_API_MINOR)
      fail("implements device API " + std::to_string(api_->api_major) + "." + std::to_string(api_->api_minor) +
           ", this hwadapter provides " + std::to_string(HWA_API_MAJOR) + "." + std::to_string(HWA_API_MINOR));
    const void *required[] = {(void *)api_->device_count, (void *)api_->allocate, (void *)api_->deallocate,
                              (void *)api_->memcpy_h2d, (void *)api_->memcpy_d2h, (void *)api_->memcpy_d2d,
                              (void *)api_->memset, (void *)api_->synchronize};
    for (auto *fn : required)
      if (!fn) fail("leaves a required function pointer empty");
  }
  ~NativeDevice() {
    if (handle_) dlclose(handle_);
  }
  NativeDevice(const NativeDevice &) = delete;
  NativeDevice &operator=(const NativeDevice &) = delete;

  std::string device_type() const { return api_->device_type ? api_->device_type : ""; }
  py::tuple api_version() const { return py::make_tuple(api_->api_major, api_->api_minor); }

  int device_count() {
    int n = 0;
    check(api_->device_count(&n), "device_count");
    return n;
  }
  uintptr_t allocate(int dev, size_t nbytes) {
    void *ptr = nullptr;
    int rc;
    {
      py::gil_scoped_release release;
      rc = api_->allocate(dev, nbytes, &ptr);
    }
    if (rc == HWA_OUT_OF_MEMORY)
      throw OutOfMemory(device_type() + ": device " + std::to_string(dev) + " is out of memory (" + std::to_string(nbytes) + " bytes requested)");
    check(rc, "allocate");
    return reinterpret_cast<uintptr_t>(ptr);
  }
  void deallocate(int dev, uintptr_t ptr) { check(api_->deallocate(dev, reinterpret_cast<void *>(ptr)), "deallocate"); }
  void copy_h2d(int dev, uintptr_t dst, py::buffer src) {
    py::buffer_info info = src.request();
    size_t n = static_cast<size_t>(info.size * info.itemsize);
    py::gil_scoped_release release;
    check(api_->memcpy_h2d(dev, reinterpret_cast<void *>(dst), info.ptr, n), "memcpy_h2d");
  }
  void copy_d2h(int dev, py::buffer dst, uintptr_t src) {
    py::buffer_info info = dst.request(true);
    size_t n = static_cast<size_t>(info.size * info.itemsize);
    py::gil_scoped_release release;
    check(api_->memcpy_d2h(dev, info.ptr, reinterpret_cast<const void *>(src), n), "memcpy_d2h");
  }
  void copy_d2d(int dev, uintptr_t dst, uintptr_t src, size_t nbytes) {
    py::gil_scoped_release release;
    check(api_->memcpy_d2d(dev, reinterpret_cast<void *>(dst), reinterpret_cast<const void *>(src), nbytes), "memcpy_d2d");
  }
  void memset(int dev, uintptr_t dst, int value, size_t nbytes) {
    check(api_->memset(dev, reinterpret_cast<void *>(dst), value, nbytes), "memset");
  }
  void synchronize(int dev) { check(api_->synchronize(dev), "synchronize"); }
  py::tuple memory_info(int dev) {
    size_t free_b = 0, total_b = 0;
    if (api_->memory_info) check(api_->memory_info(dev, &free_b, &total_b), "memory_info");
    return py::make_tuple(free_b, total_b);
  }

 private:
  [[noreturn]] void fail(const std::string &why) {
    if (handle_) dlclose(handle_);
    handle_ = nullptr;
    throw std::runtime_error(path_ + " " + why);
  }
  void check(int rc, const char *what) {
    if (rc != HWA_OK)
      throw std::runtime_error(device_type() + " (" + path_ + "): " + what + " failed with status " + std::to_string(rc));
  }
  std::string path_;
  void *handle_ = nullptr;
  const HwaDeviceInterface *api_ = nullptr;
};

}  // namespace

PYBIND11_MODULE(_native, m) {
  m.doc() = "Loads vendor C device libraries that implement hwadapter/device_api.h.";
  m.attr("API_VERSION") = py::make_tuple(HWA_API_MAJOR, HWA_API_MINOR);
  py::register_exception<OutOfMemory>(m, "OutOfMemory", PyExc_MemoryError);
  py::class_<NativeDevice>(m, "NativeDevice")
      .def(py::init<const std::string &>(), py::arg("path"))
      .def_property_readonly("device_type", &NativeDevice::device_type)
      .def_property_readonly("api_version", &NativeDevice::api_version)
      .def("device_count", &NativeDevice::device_count)
      .def("allocate", &NativeDevice::allocate)
      .def("deallocate", &NativeDevice::deallocate)
      .def("copy_h2d", &NativeDevice::copy_h2d)
      .def("copy_d2h", &NativeDevice::copy_d2h)
      .def("copy_d2d", &NativeDevice::copy_d2d)
      .def("memset", &NativeDevice::memset)
      .def("synchronize", &NativeDevice::synchronize)
      .def("memory_info", &NativeDevice::memory_info);
}

/* hwadapter device C ABI: a vendor with a C driver fills this table in a shared library.
 *
 * In the spirit of Paddle's C_DeviceInterface and the PJRT C API: a struct of function pointers
 * with its own size and version, so the core can check what it was given before calling anything.
 * Every function returns 0 on success and a non-zero HWA_* status on failure.
 */
#ifndef HWADAPTER_DEVICE_API_H
#define HWADAPTER_DEVICE_API_H

#include <stddef.h>
#include <stdint.h>

#define HWA_API_MAJOR 1
#define HWA_API_MINOR 0

#define HWA_OK 0
#define HWA_ERROR 1
#define HWA_OUT_OF_MEMORY 2

#ifdef __cplusplus
extern "C" {
#endif

typedef struct HwaDeviceInterface {
  size_t struct_size;   /* sizeof(HwaDeviceInterface) as the vendor compiled it */
  uint32_t api_major;   /* must equal HWA_API_MAJOR */
  uint32_t api_minor;   /* must be <= HWA_API_MINOR */
  const char *device_type;

  int (*device_count)(int *count);
  int (*allocate)(int device, size_t nbytes, void **ptr);
  int (*deallocate)(int device, void *ptr);
  int (*memcpy_h2d)(int device, void *dst, const void *src, size_t nbytes);
  int (*memcpy_d2h)(int device, void *dst, const void *src, size_t nbytes);
  int (*memcpy_d2d)(int device, void *dst, const void *src, size_t nbytes);
  int (*memset)(int device, void *dst, int value, size_t nbytes);
  int (*synchronize)(int device);
  int (*memory_info)(int device, size_t *free_bytes, size_t *total_bytes);
} HwaDeviceInterface;

/* The one symbol a vendor library exports. */
typedef const HwaDeviceInterface *(*HwaGetDeviceInterfaceFn)(void);
#define HWA_GET_DEVICE_INTERFACE "hwadapter_get_device_interface"

#ifdef __cplusplus
}
#endif
#endif

/* The host CPU as a device_api.h 1.1 library, for native hosts (the Paddle bridge); hwadapter itself uses the
 * numpy runtime (runtime.py). One device: aligned host memory, with the physical memory as its stated capacity;
 * copies are memcpy; no streams (every call completes before it returns).
 *
 * Built by native.py with -DDEVICE_TYPE="<the plugin's entry-point name>": the source names no device type.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hwadapter/device_api.h"
#include "hwadapter/device_helpers.h" /* hwa_fail, the live-block table */

#ifndef DEVICE_TYPE
#define DEVICE_TYPE "host"
#endif
#define ALIGNMENT 64

static _Thread_local int current_device;
static HwaBlocks blocks = HWA_BLOCKS_INIT; /* live allocations, and the bytes they hold against the capacity */

static size_t capacity(void) {
  long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);
  return pages > 0 && size > 0 ? (size_t)pages * (size_t)size : (size_t)1 << 32;
}

#define CHECK_DEVICE(d) \
  if ((d) != 0) return hwa_fail(HWA_INVALID_ARGUMENT, DEVICE_TYPE ": no device %d (there is one, 0)", (d))

static int device_count(int *count) {
  *count = 1;
  return HWA_OK;
}

static int allocate(int d, size_t nbytes, void **ptr) {
  CHECK_DEVICE(d);
  size_t total = capacity(), rounded = (nbytes + ALIGNMENT - 1) / ALIGNMENT * ALIGNMENT, in_use;
  int room = hwa_blocks_reserve(&blocks, nbytes, total, &in_use);
  void *p = room ? aligned_alloc(ALIGNMENT, rounded ? rounded : ALIGNMENT) : NULL;
  if (p && hwa_blocks_add(&blocks, p, nbytes, 0) != HWA_OK) {
    free(p);
    p = NULL;
  }
  if (!p) {
    if (room) hwa_blocks_release(&blocks, nbytes);
    return hwa_fail(HWA_OUT_OF_MEMORY, DEVICE_TYPE ": device 0 cannot allocate %zu bytes (%zu of %zu in use)",
                    nbytes, in_use, total);
  }
  *ptr = p;
  return HWA_OK;
}

static int deallocate(int d, void *ptr) {
  CHECK_DEVICE(d);
  if (!ptr) return HWA_OK;
  size_t size;
  if (!hwa_blocks_remove(&blocks, ptr, 0, &size))
    return hwa_fail(HWA_INVALID_ARGUMENT, DEVICE_TYPE ": %p is not a live allocation of device 0 (freed twice, or "
                    "never allocated here)", ptr);
  hwa_blocks_release(&blocks, size);
  free(ptr);
  return HWA_OK;
}

static int copy(int d, void *dst, const void *src, size_t n) {
  CHECK_DEVICE(d);
  if (n) memmove(dst, src, n);
  return HWA_OK;
}

static int set(int d, void *dst, int value, size_t n) {
  CHECK_DEVICE(d);
  if (n) memset(dst, value, n);
  return HWA_OK;
}

static int synchronize(int d) {
  CHECK_DEVICE(d);
  return HWA_OK;
}

static int memory_info(int d, size_t *free_bytes, size_t *total_bytes) {
  CHECK_DEVICE(d);
  size_t total = capacity(), used = hwa_blocks_used(&blocks);
  *free_bytes = used < total ? total - used : 0;
  *total_bytes = total;
  return HWA_OK;
}

static int get_properties(int d, HwaDeviceProperties *p) {
  CHECK_DEVICE(d);
  size_t size = p->struct_size;  /* write nothing past what the caller's header had */
  HwaDeviceProperties full;
  memset(&full, 0, sizeof full);
  snprintf(full.name, sizeof full.name, "%s:0", DEVICE_TYPE);
  snprintf(full.vendor, sizeof full.vendor, "hwadapter (host memory)");
  full.total_memory = capacity();
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  full.compute_units = cores > 0 ? (int32_t)cores : 1;
  full.max_work_group_size = 1;
  full.alignment = ALIGNMENT;
  memcpy(p, &full, size < sizeof full ? size : sizeof full);
  p->struct_size = size;
  return HWA_OK;
}

static int set_device(int d) {
  CHECK_DEVICE(d);
  current_device = d;
  return HWA_OK;
}
static int get_device(int *d) {
  *d = current_device;
  return HWA_OK;
}

static const HwaDeviceInterface table = {
    .struct_size = sizeof(HwaDeviceInterface),
    .api_major = HWA_API_MAJOR,
    .api_minor = HWA_API_MINOR,
    .device_type = DEVICE_TYPE,
    .device_count = device_count,
    .allocate = allocate,
    .deallocate = deallocate,
    .memcpy_h2d = copy,
    .memcpy_d2h = copy,
    .memcpy_d2d = copy,
    .memset = set,
    .synchronize = synchronize,
    .memory_info = memory_info,
    .get_properties = get_properties,
    .set_device = set_device,
    .get_device = get_device,
    .last_error = hwa_last_error,
};

__attribute__((visibility("default"))) const HwaDeviceInterface *hwadapter_get_device_interface(void) {
  return &table;
}

/* hwadapter device C ABI helpers: what every device_api.h library needs and need not write again.
 *
 *   hwa_fail / hwa_last_error   the thread-local message behind the table's `last_error`
 *   HwaBlocks                   the live allocations of a device: `deallocate` is given only the pointer, a double
 *                               free must be HWA_INVALID_ARGUMENT, and a host may pass a pointer inside a block
 *
 * Header-only (static inline: one copy per library, unused parts cost nothing); C11 or C++11 and later, POSIX threads.
 * Include it after device_api.h; a library may define HWA_MESSAGE_SIZE first for a longer message.
 */
#ifndef HWADAPTER_DEVICE_HELPERS_H
#define HWADAPTER_DEVICE_HELPERS_H

#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "hwadapter/device_api.h"

#ifdef __cplusplus
#define HWA_THREAD_LOCAL thread_local
#else
#define HWA_THREAD_LOCAL _Thread_local
#endif

#ifndef HWA_MESSAGE_SIZE
#define HWA_MESSAGE_SIZE 768
#endif
#define HWA_BUCKETS 1024

/* ---- errors: a failed call returns its status and leaves a message for last_error, per thread ---- */
static HWA_THREAD_LOCAL char hwa_message[HWA_MESSAGE_SIZE];

/* Records the printf-style message and returns `status`: `return hwa_fail(HWA_INVALID_ARGUMENT, "...", ...);`. */
static inline int hwa_fail(int status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static inline int hwa_fail(int status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(hwa_message, sizeof hwa_message, fmt, ap);
  va_end(ap);
  return status;
}

/* The calling thread's last message: the table's `last_error`. */
static inline const char *hwa_last_error(void) { return hwa_message; }

/* ---- live blocks: a hash table of allocations under its own lock ---- */
typedef struct HwaBlock {
  void *ptr;
  size_t size;
  int device;
  struct HwaBlock *next;
} HwaBlock;

typedef struct HwaBlocks {
  pthread_mutex_t lock;
  size_t used;                    /* bytes reserved with hwa_blocks_reserve and not yet released */
  HwaBlock *buckets[HWA_BUCKETS];
} HwaBlocks;

/* A static table: `static HwaBlocks blocks = HWA_BLOCKS_INIT;` (or hwa_blocks_init on one made at run time). */
#define HWA_BLOCKS_INIT {PTHREAD_MUTEX_INITIALIZER, 0, {NULL}}

static inline void hwa_blocks_init(HwaBlocks *t) {
  pthread_mutex_init(&t->lock, NULL);
  t->used = 0;
  for (int i = 0; i < HWA_BUCKETS; ++i) t->buckets[i] = NULL;
}

static inline HwaBlock **hwa_bucket(HwaBlocks *t, const void *p) {
  return &t->buckets[((uintptr_t)p / 64) % HWA_BUCKETS];
}

/* Counts `nbytes` against `capacity`: 1 when they fit (then held until hwa_blocks_release), 0 when not. `in_use`, if
 * not NULL, gets the bytes held before, for the out-of-memory message. */
static inline int hwa_blocks_reserve(HwaBlocks *t, size_t nbytes, size_t capacity, size_t *in_use) {
  pthread_mutex_lock(&t->lock);
  size_t used = t->used;
  int room = nbytes <= capacity && used + nbytes <= capacity;
  if (room) t->used += nbytes;
  pthread_mutex_unlock(&t->lock);
  if (in_use) *in_use = used;
  return room;
}

/* The bytes held: for memory_info. */
static inline size_t hwa_blocks_used(HwaBlocks *t) {
  pthread_mutex_lock(&t->lock);
  size_t used = t->used;
  pthread_mutex_unlock(&t->lock);
  return used;
}

static inline void hwa_blocks_release(HwaBlocks *t, size_t nbytes) {
  pthread_mutex_lock(&t->lock);
  t->used = nbytes < t->used ? t->used - nbytes : 0;
  pthread_mutex_unlock(&t->lock);
}

/* Records the allocation [ptr, ptr + size) of `device`: HWA_OK, or HWA_OUT_OF_MEMORY when the host has no memory
 * for the record (the caller frees the allocation and says so). */
static inline int hwa_blocks_add(HwaBlocks *t, void *ptr, size_t size, int device) {
  HwaBlock *b = (HwaBlock *)malloc(sizeof *b);
  if (!b) return HWA_OUT_OF_MEMORY;
  b->ptr = ptr, b->size = size, b->device = device;
  pthread_mutex_lock(&t->lock);
  b->next = *hwa_bucket(t, ptr);
  *hwa_bucket(t, ptr) = b;
  pthread_mutex_unlock(&t->lock);
  return HWA_OK;
}

/* Forgets the allocation that starts at `ptr` on `device`: 1, with its size in *size, or 0 when there is none (a
 * double free, or a pointer never allocated there). */
static inline int hwa_blocks_remove(HwaBlocks *t, const void *ptr, int device, size_t *size) {
  pthread_mutex_lock(&t->lock);
  HwaBlock **link = hwa_bucket(t, ptr);
  while (*link && ((*link)->ptr != ptr || (*link)->device != device)) link = &(*link)->next;
  HwaBlock *b = *link;
  if (b) *link = b->next;
  pthread_mutex_unlock(&t->lock);
  if (!b) return 0;
  if (size) *size = b->size;
  free(b);
  return 1;
}

/* 1 when an allocation (or any handle recorded here) of `device` starts at `ptr`, else 0. */
static inline int hwa_blocks_live(HwaBlocks *t, const void *ptr, int device) {
  pthread_mutex_lock(&t->lock);
  HwaBlock *b = *hwa_bucket(t, ptr);
  while (b && (b->ptr != ptr || b->device != device)) b = b->next;
  pthread_mutex_unlock(&t->lock);
  return b != NULL;
}

/* 1 when [p, p + n) lies inside one live allocation of `device` (a block of 0 bytes holds its first address), with
 * that allocation's start and size in *base and *size when they are not NULL; 0 otherwise. Walks every block. */
static inline int hwa_blocks_find(HwaBlocks *t, const void *p, size_t n, int device, void **base, size_t *size) {
  const char *c = (const char *)p;
  int found = 0;
  pthread_mutex_lock(&t->lock);
  for (int i = 0; i < HWA_BUCKETS && !found; ++i)
    for (HwaBlock *b = t->buckets[i]; b && !found; b = b->next) {
      const char *start = (const char *)b->ptr;
      size_t extent = b->size ? b->size : 1;
      if (b->device == device && c >= start && (size_t)(c - start) <= extent && n <= extent - (size_t)(c - start) &&
          (n || c < start + extent)) {
        found = 1;
        if (base) *base = b->ptr;
        if (size) *size = b->size;
      }
    }
  pthread_mutex_unlock(&t->lock);
  return found;
}

#endif /* HWADAPTER_DEVICE_HELPERS_H */

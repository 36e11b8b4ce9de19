/* A test device library that brings its own communicator (device_api.h 1.2), built on MPI with MPICH's mpicc.
 *
 * Memory is host malloc. Streams hold MPI's nonblocking requests: each collective is queued on its stream (NULL:
 * the default one) and completes when that stream is synchronised, as a vendor's would on its device; the
 * synchronous copies first complete every stream (they are ordered after all queued work). A unique id is a
 * magic and the world's size; a communicator is MPI_Comm_dup of MPI_COMM_WORLD, so a group is the whole world.
 *
 * -DTABLE_1_1: the communication functions are set but struct_size stops before them (a 1.1 table): the core
 * must not see them. -DNO_OPTIONAL: only the six required communication functions. -DNO_BROADCAST: one of
 * those six missing (refused).
 */
#include <mpi.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "hwadapter/device_api.h"
#include "hwadapter/device_helpers.h"

#define MAGIC "HWAMPI01"
#define MAX_PENDING 256

/* ---- memory ---- */
static int count(int *n) { *n = 1; return HWA_OK; }
static int alloc(int d, size_t n, void **p) { *p = malloc(n ? n : 1); return *p ? HWA_OK : HWA_OUT_OF_MEMORY; }
static int dealloc(int d, void *p) { free(p); return HWA_OK; }
static int info(int d, size_t *f, size_t *t) { *f = *t = (size_t)1 << 30; return HWA_OK; }

/* ---- streams: MPI requests, and what to do once each completes (an average's division) ---- */
typedef struct Pending {
  MPI_Request req;
  void *avg;          /* divide these `count` elements by `nranks` once done, or NULL */
  size_t count;
  HwaDType dtype;
  int nranks;
} Pending;
struct HwaStream_st {
  Pending items[MAX_PENDING];
  int len;
  struct HwaStream_st *next;
};
struct HwaEvent_st { int unused; };
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct HwaStream_st default_stream;
static struct HwaStream_st *streams = &default_stream;  /* every live stream, the default one last */

static struct HwaStream_st *stream_of(HwaStream s) { return s ? s : &default_stream; }

#define DIVIDE(T, floor_div) \
  do { \
    T *x = (T *)p->avg; \
    for (size_t i = 0; i < p->count; ++i) { \
      if (floor_div) { \
        T q = (T)(x[i] / (T)p->nranks); \
        x[i] = (q * (T)p->nranks != x[i] && (x[i] < 0)) ? (T)(q - 1) : q; \
      } else { \
        x[i] = (T)(x[i] / (T)p->nranks); \
      } \
    } \
  } while (0)

static void finish(Pending *p) {
  if (!p->avg) return;
  switch (p->dtype) {
    case HWA_FLOAT32: DIVIDE(float, 0); break;
    case HWA_FLOAT64: DIVIDE(double, 0); break;
    case HWA_INT8: DIVIDE(int8_t, 1); break;
    case HWA_INT16: DIVIDE(int16_t, 1); break;
    case HWA_INT32: DIVIDE(int32_t, 1); break;
    case HWA_INT64: DIVIDE(int64_t, 1); break;
    case HWA_UINT8: DIVIDE(uint8_t, 0); break;
    default: break;
  }
}

/* Completes everything queued on s (lock held only between tests: other threads may queue meanwhile). */
static int drain(struct HwaStream_st *s) {
  for (;;) {
    pthread_mutex_lock(&lock);
    int done = 1, rc = MPI_SUCCESS;
    for (int i = 0; i < s->len && done && rc == MPI_SUCCESS; ++i) rc = MPI_Test(&s->items[i].req, &done, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) {
      pthread_mutex_unlock(&lock);
      return hwa_fail(HWA_ERROR, "MPI_Test failed with MPI error %d", rc);
    }
    if (done) {
      for (int i = 0; i < s->len; ++i) finish(&s->items[i]);
      s->len = 0;
    }
    pthread_mutex_unlock(&lock);
    if (done) return HWA_OK;
    sched_yield();
  }
}

static int drain_all(void) {
  for (struct HwaStream_st *s = streams; s; s = s->next) {
    int rc = drain(s);
    if (rc) return rc;
  }
  return HWA_OK;
}

static int s_new(int d, HwaStream *out) {
  struct HwaStream_st *s = calloc(1, sizeof *s);
  if (!s) return HWA_OUT_OF_MEMORY;
  pthread_mutex_lock(&lock);
  s->next = streams;
  streams = s;
  pthread_mutex_unlock(&lock);
  *out = s;
  return HWA_OK;
}
static int s_del(int d, HwaStream s) {
  int rc = drain(s);
  pthread_mutex_lock(&lock);
  for (struct HwaStream_st **p = &streams; *p; p = &(*p)->next)
    if (*p == s) { *p = s->next; break; }
  pthread_mutex_unlock(&lock);
  free(s);
  return rc;
}
static int s_sync(int d, HwaStream s) { return drain(stream_of(s)); }
static int s_query(int d, HwaStream s) {
  struct HwaStream_st *st = stream_of(s);
  pthread_mutex_lock(&lock);
  int done = 1;
  for (int i = 0; i < st->len && done; ++i) MPI_Test(&st->items[i].req, &done, MPI_STATUS_IGNORE);
  pthread_mutex_unlock(&lock);
  return done ? HWA_OK : HWA_NOT_READY;
}
/* An event completes its stream's work when recorded: later waits on it have nothing left to wait for. */
static int e_new(int d, HwaEvent *e) { *e = calloc(1, sizeof **e); return *e ? HWA_OK : HWA_OUT_OF_MEMORY; }
static int e_del(int d, HwaEvent e) { free(e); return HWA_OK; }
static int e_record(int d, HwaEvent e, HwaStream s) { return drain(stream_of(s)); }
static int e_query(int d, HwaEvent e) { return HWA_OK; }
static int e_sync(int d, HwaEvent e) { return HWA_OK; }
static int s_wait(int d, HwaStream s, HwaEvent e) { return HWA_OK; }

/* ---- synchronous copies: after every stream's work ---- */
static int cp(int d, void *dst, const void *src, size_t n) {
  int rc = drain_all();
  if (!rc) memmove(dst, src, n);
  return rc;
}
static int set(int d, void *dst, int v, size_t n) {
  int rc = drain_all();
  if (!rc) memset(dst, v, n);
  return rc;
}
static int sync_(int d) { return drain_all(); }

/* ---- communicators ---- */
struct HwaComm_st {
  MPI_Comm comm;
  int nranks;
};

static int ensure_mpi(void) {
  int ready = 0, provided;
  MPI_Initialized(&ready);
  if (!ready && MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS)
    return hwa_fail(HWA_ERROR, "MPI_Init_thread failed");
  return HWA_OK;
}

static size_t itemsize(HwaDType t) {
  switch (t) {
    case HWA_BOOL: case HWA_UINT8: case HWA_INT8: return 1;
    case HWA_INT16: case HWA_FLOAT16: return 2;
    case HWA_INT32: case HWA_FLOAT32: return 4;
    case HWA_INT64: case HWA_FLOAT64: return 8;
    default: return 0;
  }
}

/* The MPI type and op of a reduction, or a status with a message. */
static int reduction(HwaDType t, HwaReduceOp op, MPI_Datatype *type, MPI_Op *mop) {
  switch (t) {
    case HWA_BOOL: *type = MPI_C_BOOL; break;
    case HWA_UINT8: *type = MPI_UINT8_T; break;
    case HWA_INT8: *type = MPI_INT8_T; break;
    case HWA_INT16: *type = MPI_INT16_T; break;
    case HWA_INT32: *type = MPI_INT32_T; break;
    case HWA_INT64: *type = MPI_INT64_T; break;
    case HWA_FLOAT32: *type = MPI_FLOAT; break;
    case HWA_FLOAT64: *type = MPI_DOUBLE; break;
    default: return hwa_fail(HWA_UNSUPPORTED, "no reduction of dtype %d: MPI has no type for it", (int)t);
  }
  if (t == HWA_BOOL) {
    if (op == HWA_REDUCE_AVG) return hwa_fail(HWA_UNSUPPORTED, "no average of bool");
    *mop = (op == HWA_REDUCE_SUM || op == HWA_REDUCE_MAX) ? MPI_LOR : MPI_LAND;
    return HWA_OK;
  }
  switch (op) {
    case HWA_REDUCE_SUM: case HWA_REDUCE_AVG: *mop = MPI_SUM; return HWA_OK;
    case HWA_REDUCE_MAX: *mop = MPI_MAX; return HWA_OK;
    case HWA_REDUCE_MIN: *mop = MPI_MIN; return HWA_OK;
    case HWA_REDUCE_PROD: *mop = MPI_PROD; return HWA_OK;
    default: return hwa_fail(HWA_INVALID_ARGUMENT, "unknown reduce op %d", (int)op);
  }
}

/* Queues one nonblocking MPI call (call_ fills REQ, its request) on stream s_; avg_: divide it once done. */
#define QUEUE(s_, call_, avg_, count_, dtype_, ranks_) \
  do { \
    struct HwaStream_st *st_ = stream_of(s_); \
    pthread_mutex_lock(&lock); \
    if (st_->len == MAX_PENDING) { \
      pthread_mutex_unlock(&lock); \
      int rc_ = drain(st_); \
      if (rc_) return rc_; \
      pthread_mutex_lock(&lock); \
    } \
    Pending *p_ = &st_->items[st_->len]; \
    int rc_ = (call_); \
    if (rc_ != MPI_SUCCESS) { \
      pthread_mutex_unlock(&lock); \
      return hwa_fail(HWA_ERROR, "%s failed with MPI error %d", #call_, rc_); \
    } \
    p_->avg = (avg_); p_->count = (count_); p_->dtype = (dtype_); p_->nranks = (ranks_); \
    st_->len++; \
    pthread_mutex_unlock(&lock); \
  } while (0)
#define REQ (&p_->req)
#define IN_PLACE(send, recv) ((send) == (recv) ? MPI_IN_PLACE : (send))

static int uid_size(size_t *n) { *n = 16; return HWA_OK; }
static int uid(void *id, size_t n) {
  int rc = ensure_mpi(), world;
  if (rc) return rc;
  if (n != 16) return hwa_fail(HWA_INVALID_ARGUMENT, "a unique id is 16 bytes, not %zu", n);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  int32_t size = world;
  memcpy(id, MAGIC, 8);
  memcpy((char *)id + 8, &size, 4);
  memset((char *)id + 12, 0, 4);
  return HWA_OK;
}
static int init_rank(int device, const void *id, size_t n, int nranks, int rank, HwaComm *out) {
  int rc = ensure_mpi(), world, me;
  if (rc) return rc;
  if (n != 16 || memcmp(id, MAGIC, 8)) return hwa_fail(HWA_INVALID_ARGUMENT, "not a unique id of this library");
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  if (nranks != world || rank != me)
    return hwa_fail(HWA_UNSUPPORTED, "this library's communicators span MPI_COMM_WORLD only (%d ranks, this one "
                    "%d), not rank %d of %d", world, me, rank, nranks);
  HwaComm c = calloc(1, sizeof *c);
  if (!c) return HWA_OUT_OF_MEMORY;
  if (MPI_Comm_dup(MPI_COMM_WORLD, &c->comm) != MPI_SUCCESS) { free(c); return hwa_fail(HWA_ERROR, "MPI_Comm_dup failed"); }
  c->nranks = nranks;
  *out = c;
  return HWA_OK;
}
static int destroy(HwaComm c) {
  if (!c) return hwa_fail(HWA_INVALID_ARGUMENT, "no communicator");
  int rc = drain_all();
  MPI_Comm_free(&c->comm);
  free(c);
  return rc;
}

static int all_reduce(const void *send, void *recv, size_t n, HwaDType t, HwaReduceOp op, HwaComm c, HwaStream s) {
  MPI_Datatype type; MPI_Op mop;
  int rc = reduction(t, op, &type, &mop);
  if (rc) return rc;
  QUEUE(s, MPI_Iallreduce(IN_PLACE(send, recv), recv, (int)n, type, mop, c->comm, REQ),
        op == HWA_REDUCE_AVG ? recv : NULL, n, t, c->nranks);
  return HWA_OK;
}
static int broadcast(void *buf, size_t n, HwaDType t, int root, HwaComm c, HwaStream s) {
  QUEUE(s, MPI_Ibcast(buf, (int)(n * itemsize(t)), MPI_BYTE, root, c->comm, REQ), NULL, 0, t, 0);
  return HWA_OK;
}
static int reduce(const void *send, void *recv, size_t n, HwaDType t, HwaReduceOp op, int root, HwaComm c,
                  HwaStream s) {
  MPI_Datatype type; MPI_Op mop;
  int rc = reduction(t, op, &type, &mop), me;
  if (rc) return rc;
  MPI_Comm_rank(c->comm, &me);
  const void *in = send;
  if (send == recv) in = me == root ? MPI_IN_PLACE : send;  /* MPI_IN_PLACE is for the root alone */
  QUEUE(s, MPI_Ireduce(in, me == root ? recv : NULL, (int)n, type, mop, root, c->comm, REQ),
        op == HWA_REDUCE_AVG && me == root ? recv : NULL, n, t, c->nranks);
  return HWA_OK;
}
static int all_gather(const void *send, void *recv, size_t n, HwaDType t, HwaComm c, HwaStream s) {
  int bytes = (int)(n * itemsize(t));
  QUEUE(s, MPI_Iallgather(send, bytes, MPI_BYTE, recv, bytes, MPI_BYTE, c->comm, REQ), NULL, 0, t, 0);
  return HWA_OK;
}
static int reduce_scatter(const void *send, void *recv, size_t n, HwaDType t, HwaReduceOp op, HwaComm c,
                          HwaStream s) {
  MPI_Datatype type; MPI_Op mop;
  int rc = reduction(t, op, &type, &mop);
  if (rc) return rc;
  QUEUE(s, MPI_Ireduce_scatter_block(send, recv, (int)n, type, mop, c->comm, REQ),
        op == HWA_REDUCE_AVG ? recv : NULL, n, t, c->nranks);
  return HWA_OK;
}
static int all_to_all(const void *send, void *recv, size_t n, HwaDType t, HwaComm c, HwaStream s) {
  int bytes = (int)(n * itemsize(t));
  QUEUE(s, MPI_Ialltoall(send, bytes, MPI_BYTE, recv, bytes, MPI_BYTE, c->comm, REQ), NULL, 0, t, 0);
  return HWA_OK;
}
static int send_(const void *buf, size_t n, HwaDType t, int peer, HwaComm c, HwaStream s) {
  QUEUE(s, MPI_Isend(buf, (int)(n * itemsize(t)), MPI_BYTE, peer, 0, c->comm, REQ), NULL, 0, t, 0);
  return HWA_OK;
}
static int recv_(void *buf, size_t n, HwaDType t, int peer, HwaComm c, HwaStream s) {
  QUEUE(s, MPI_Irecv(buf, (int)(n * itemsize(t)), MPI_BYTE, peer, 0, c->comm, REQ), NULL, 0, t, 0);
  return HWA_OK;
}

static HwaDeviceInterface api = {
    .struct_size = sizeof(HwaDeviceInterface),
    .api_major = HWA_API_MAJOR,
    .api_minor = HWA_API_MINOR,
    .device_type = "mpidev",
    .device_count = count, .allocate = alloc, .deallocate = dealloc,
    .memcpy_h2d = cp, .memcpy_d2h = cp, .memcpy_d2d = cp, .memset = set, .synchronize = sync_, .memory_info = info,
    .stream_create = s_new, .stream_destroy = s_del, .stream_synchronize = s_sync, .stream_query = s_query,
    .stream_wait_event = s_wait, .event_create = e_new, .event_destroy = e_del, .event_record = e_record,
    .event_query = e_query, .event_synchronize = e_sync,
    .last_error = hwa_last_error,
    .comm_unique_id_size = uid_size, .comm_unique_id = uid, .comm_init_rank = init_rank, .comm_destroy = destroy,
    .all_reduce = all_reduce,
#ifndef NO_BROADCAST
    .broadcast = broadcast,
#endif
#ifndef NO_OPTIONAL
    .reduce = reduce, .all_gather = all_gather, .reduce_scatter = reduce_scatter, .all_to_all = all_to_all,
    .send = send_, .recv = recv_,
#endif
};

__attribute__((visibility("default"))) const HwaDeviceInterface *hwadapter_get_device_interface(void) {
#ifdef TABLE_1_1
  api.struct_size = offsetof(HwaDeviceInterface, comm_unique_id_size);
  api.api_minor = 1;
#endif
  return &api;
}

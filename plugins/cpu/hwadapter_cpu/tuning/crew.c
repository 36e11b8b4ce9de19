/* The CPU's one scheduler (blasconv.py, matmul.py): threads in C that share one call's tasks with the calling
 * thread, without the GIL. Handing the GIL between Python threads costs a sleeping thread's wake-up per call; these
 * threads watch for the next call for a while before sleeping, and claim tasks with one atomic word.
 *
 * A call posts (task function, parameters, ranges); each thread claims the next range until none is left. The
 * claim word holds the call's number in its high half, so a thread that saw an earlier call can never claim
 * a range of a later one. A thread that is descheduled holds back only the range it took. */
#define _GNU_SOURCE /* clock_gettime, posix_memalign under -std=c99; sched_getcpu, sched_setaffinity */
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define RELAX() _mm_pause()
#else
#define RELAX() ((void)0)
#endif

typedef void (*hwa_task)(const int64_t *params, int64_t a, int64_t b);

typedef struct {
  pthread_mutex_t lock;
  pthread_cond_t posted, finished;
  int64_t helpers, started, spin_ns, wait_ns;
  int64_t sleepers;         /* helpers asleep on `posted` */
  int64_t busy;             /* a call is running: another caller at the same time runs its tasks alone */
  uint64_t claim;           /* call number << 32 | next range */
  int64_t left;             /* ranges of the current call not yet done */
  hwa_task task;
  const int64_t *params, *ranges;
  int64_t count;
  int cpu;                  /* the CPU the caller posted the current call from, or -1 */
  pid_t pid;                /* the process that made it: a forked child has none of its threads */
} hwa_crew;

static int64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* Built by tests/test_cpu_crew.py with CREW_TEST_PAUSE_NS: pauses that widen the windows between a call's fields
 * and its posting, and after a thread's range, so that a race there happens every time; nothing otherwise. */
#ifdef CREW_TEST_PAUSE_NS
static void test_pause(int64_t times) {
  int64_t end = now_ns() + times * CREW_TEST_PAUSE_NS;
  while (now_ns() < end) RELAX();
}
#else
#define test_pause(times) ((void)0)
#endif

/* The CPU this thread runs on, or -1 where the system does not say. */
static int this_cpu(void) {
#ifdef __linux__
  return sched_getcpu();
#else
  return -1;
#endif
}

/* A helper woken onto the caller's CPU moves to another it may run on. Linux may wake a thread onto its waker's CPU
 * while the other is idle (a virtual machine's idle CPU can look busy to the guest); the two then take turns there in
 * scheduler ticks, and a model's call ran at a third of its speed until the balancer moved one. */
void hwa_leave_cpu(int cpu) {
#ifdef __linux__
  cpu_set_t allowed, others;
  if (cpu < 0 || cpu >= CPU_SETSIZE || this_cpu() != cpu || sched_getaffinity(0, sizeof allowed, &allowed)) return;
  others = allowed;
  CPU_CLR(cpu, &others);
  if (CPU_COUNT(&others) == 0 || sched_setaffinity(0, sizeof others, &others)) return;
  sched_setaffinity(0, sizeof allowed, &allowed); /* moved now; free again to go where the scheduler sends it */
#else
  (void)cpu;
#endif
}

/* Runs the ranges of call `call` until none is left; a later call's ranges are never taken. */
static void work(hwa_crew *c, uint64_t call) {
  for (;;) {
    uint64_t w = __atomic_load_n(&c->claim, __ATOMIC_ACQUIRE);
    if (w >> 32 != call) return;
    uint64_t i = w & 0xffffffffu;
    if ((int64_t)i >= c->count) return;
    if (!__atomic_compare_exchange_n(&c->claim, &w, w + 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) continue;
    c->task(c->params, c->ranges[2 * i], c->ranges[2 * i + 1]); /* fields stay: the call waits for this range */
    if (__atomic_sub_fetch(&c->left, 1, __ATOMIC_ACQ_REL) == 0) {
      pthread_mutex_lock(&c->lock);
      pthread_cond_broadcast(&c->finished);
      pthread_mutex_unlock(&c->lock);
      test_pause(1);
    }
  }
}

static void *serve(void *arg) {
  hwa_crew *c = arg;
  uint64_t seen = 0;
  for (;;) {
    int64_t end = now_ns() + c->spin_ns;
    uint64_t call = __atomic_load_n(&c->claim, __ATOMIC_ACQUIRE) >> 32;
    for (int64_t i = 1; call == seen; i++, call = __atomic_load_n(&c->claim, __ATOMIC_ACQUIRE) >> 32) {
      if ((i & 255) == 0) {
        hwa_leave_cpu(__atomic_load_n(&c->cpu, __ATOMIC_RELAXED)); /* spinning on the caller's CPU takes its turns */
        if (now_ns() >= end) { /* nothing came: sleep until a call is posted */
          pthread_mutex_lock(&c->lock);
          c->sleepers++;
          while ((call = __atomic_load_n(&c->claim, __ATOMIC_ACQUIRE) >> 32) == seen)
            pthread_cond_wait(&c->posted, &c->lock);
          c->sleepers--;
          pthread_mutex_unlock(&c->lock);
          break;
        }
      }
      RELAX();
    }
    seen = call;
    hwa_leave_cpu(__atomic_load_n(&c->cpu, __ATOMIC_RELAXED));
    work(c, call);
  }
  return NULL;
}

/* The crew as new: no threads started, nothing running, fresh locks (also in a forked child, whose copy of the
 * parent's locks may be held by threads it does not have). */
static void reset(hwa_crew *c) {
  pthread_mutex_init(&c->lock, NULL);
  pthread_cond_init(&c->posted, NULL);
  pthread_cond_init(&c->finished, NULL);
  c->started = c->busy = c->sleepers = 0;
  c->pid = getpid();
}

/* A crew of `helpers` threads (started on first use) that watch for calls for spin_ns before sleeping; a caller
 * watches its call's last ranges finish for wait_ns before sleeping. */
hwa_crew *hwa_crew_new(int64_t helpers, int64_t spin_ns, int64_t wait_ns) {
  hwa_crew *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  reset(c);
  c->helpers = helpers;
  c->spin_ns = spin_ns;
  c->wait_ns = wait_ns;
  return c;
}

/* task(params, ranges[2i], ranges[2i + 1]) for i < count, shared with the crew; returns when all are done. */
void hwa_crew_run(hwa_crew *c, hwa_task task, const int64_t *params, const int64_t *ranges, int64_t count) {
  if (c && c->pid != getpid()) reset(c); /* a forked child: start its own threads */
  if (!c || count <= 1 || c->helpers == 0 || __atomic_exchange_n(&c->busy, 1, __ATOMIC_ACQUIRE)) {
    for (int64_t i = 0; i < count; i++) task(params, ranges[2 * i], ranges[2 * i + 1]);
    return;
  }
  if (!c->started) { /* threads that fail to start only leave more for the caller */
    c->started = 1;
    for (int64_t i = 0; i < c->helpers; i++) {
      pthread_t t;
      if (pthread_create(&t, NULL, serve, c) == 0) pthread_detach(t);
    }
  }
  c->task = task;
  c->params = params;
  c->ranges = ranges;
  c->count = count;
  c->left = count;
  __atomic_store_n(&c->cpu, this_cpu(), __ATOMIC_RELAXED);
  test_pause(4);
  uint64_t call = (__atomic_load_n(&c->claim, __ATOMIC_RELAXED) >> 32) + 1;
  pthread_mutex_lock(&c->lock);
  __atomic_store_n(&c->claim, call << 32, __ATOMIC_RELEASE);
  int woken = c->sleepers > 0;
  pthread_cond_broadcast(&c->posted);
  pthread_mutex_unlock(&c->lock);
  if (woken) sched_yield(); /* a helper woken onto this CPU runs now and moves (hwa_leave_cpu), not at the next tick */
  work(c, call);
  int64_t end = now_ns() + c->wait_ns;
  for (int64_t i = 1; __atomic_load_n(&c->left, __ATOMIC_ACQUIRE) > 0; i++) {
    if ((i & 255) == 0 && now_ns() >= end) { /* a helper is busy with a long range: sleep until it is done */
      pthread_mutex_lock(&c->lock);
      while (__atomic_load_n(&c->left, __ATOMIC_ACQUIRE) > 0) pthread_cond_wait(&c->finished, &c->lock);
      pthread_mutex_unlock(&c->lock);
      break;
    }
    RELAX();
  }
  /* Closed: a helper that read this call's claim word as its last range was taken still holds it, and would compare
   * its index with the next call's count (set before that call is posted) and claim a range of the next call under
   * this call's number; the closed word fails its exchange. Calls back to back from C (segments) met this. */
  __atomic_store_n(&c->claim, call << 32 | 0xffffffffu, __ATOMIC_RELEASE);
  __atomic_store_n(&c->busy, 0, __ATOMIC_RELEASE);
}

/* hwa_crew_run as calls.c's entry points are called: (crew, task, params, ranges, count) -> 0. */
int64_t hwa_crew_call(int64_t crew, int64_t task, int64_t *params, int64_t ranges, int64_t count) {
  hwa_crew_run((hwa_crew *)(intptr_t)crew, (hwa_task)(intptr_t)task, params, (const int64_t *)(intptr_t)ranges, count);
  return 0;
}

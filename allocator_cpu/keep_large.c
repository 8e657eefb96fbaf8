/* keep_large.c - LD_PRELOAD shim for kernelcheck's isolated workers: the last large freed
 * block stays mapped (and unreadable) and serves the next large allocation of about its size;
 * every large block handed out reads as NaN (0xFF bytes) until written.
 *
 * Why: a Qwen3-sized trial allocates a GB-sized gradient on every backward call (the trial's,
 * then each determinism repeat's). glibc serves such blocks with fresh mmap pages and unmaps
 * them on free; on a VM that reports freed guest memory to its host (Linux free page
 * reporting), touching that memory again costs 1-5 s per GB in page clearing (measured here:
 * 25% of a Qwen3 run's CPU time in clear_page_erms). Keeping one freed block mapped lets the
 * next gradient reuse warm pages instead, in the next case of the same shape too (a worker
 * process runs a candidate's cases of one shape one after another: the fp32 gradient's block
 * serves the bf16 and fp16 ones).
 *
 * What it does: posix_memalign of LARGE bytes or more (torch's CPU allocator uses it) is
 * served by mmap; free of such a block keeps it (one block at most, the larger one) instead of
 * unmapping it; a later large request of size S <= the kept block's size is carved from its
 * front (the rest stays kept), a larger one unmaps it first and gets fresh pages. So resident
 * memory never exceeds what the live blocks need by more than one freed block. Every other
 * call goes to the C library.
 *
 * It may only expose memory bugs, never hide them (kernelcheck's rule for a case's
 * environment): a kept block is PROT_NONE, so a use after free faults as it does on the block
 * glibc would have unmapped (kept, it would still hold the freed values); every block handed
 * out, carved or fresh, is filled with 0xFF bytes (NaN in fp32, fp64, bf16 and fp16; -1 in
 * integers), so a kernel that leaves elements unwritten reads NaN there, never zeros or the
 * last call's results. KERNELCHECK_NO_KEEP_LARGE=1 leaves the shim out of the workers.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

#define LARGE ((size_t)32 << 20) /* glibc mmaps from 32 MB up anyway (its largest threshold) */
#define MAX_LIVE 64
#define HUGE_PAGE ((size_t)2 << 20)

typedef struct {
  void* addr;
  size_t size; /* mapped bytes, all handed out (filled with POISON) */
} block;

static block live[MAX_LIVE]; /* large blocks handed out */
static int n_live;           /* written under the lock, read without it (0: no large block live) */
static block kept;           /* the one freed large block kept mapped, PROT_NONE */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static int (*real_posix_memalign)(void**, size_t, size_t);
static void (*real_free)(void*);
static void* (*real_realloc)(void*, size_t);
static size_t (*real_usable_size)(void*);

/* The C library's functions. Run as a constructor, and again by any call that comes before it:
 * the constructors of libraries initialized ahead of this one may allocate (GLib's does, with
 * posix_memalign; before this, such a program aborted: "GSlice: failed to allocate"). dlsym may
 * allocate or free itself, which must not come back here. */
__attribute__((constructor)) static void resolve(void) {
  static __thread int busy;
  if (busy) return;
  busy = 1;
  real_posix_memalign = (int (*)(void**, size_t, size_t))dlsym(RTLD_NEXT, "posix_memalign");
  real_free = (void (*)(void*))dlsym(RTLD_NEXT, "free");
  real_realloc = (void* (*)(void*, size_t))dlsym(RTLD_NEXT, "realloc");
  real_usable_size = (size_t (*)(void*))dlsym(RTLD_NEXT, "malloc_usable_size");
  busy = 0;
}

/* The index of p among the live large blocks, or -1 (call with the lock held). */
static int find_live(const void* p) {
  for (int i = 0; i < n_live; ++i)
    if (live[i].addr == p) return i;
  return -1;
}

#define POISON 0xFF /* every byte of a block handed out: NaN in every float dtype */
#define FILL_THREADS 4
#define FILL_SPLIT ((size_t)256 << 20) /* blocks from this size are filled by several threads */

typedef struct {
  char* addr;
  size_t size;
} span;

static void* fill_span(void* arg) {
  span* s = (span*)arg;
  memset(s->addr, POISON, s->size);
  return 0;
}

/* Poison a block handed out, a GB-sized one with a thread per CPU (up to FILL_THREADS): memset
 * of a Qwen3 gradient (2.4 GB) took 0.41 s on one core here and 0.19 s on two, and a Qwen3 run
 * reuses such a block about ten times per dtype. A thread that cannot be started is done
 * inline. */
static void fill_block(void* addr, size_t size) {
  cpu_set_t cpus;
  int n = sched_getaffinity(0, sizeof cpus, &cpus) == 0 ? CPU_COUNT(&cpus) : 1;
  if (n > FILL_THREADS) n = FILL_THREADS;
  if (n < 1 || size < FILL_SPLIT) n = 1;
  span parts[FILL_THREADS];
  pthread_t threads[FILL_THREADS];
  int started[FILL_THREADS] = {0};
  size_t step = size / (size_t)n / HUGE_PAGE * HUGE_PAGE;
  for (int i = 0; i < n; ++i) {
    parts[i].addr = (char*)addr + (size_t)i * step;
    parts[i].size = i == n - 1 ? size - (size_t)i * step : step;
  }
  /* the helpers take no signal: SIGINT, SIGTERM and the case timeout's SIGALRM stay with
   * the threads that handle them */
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  for (int i = 1; i < n; ++i)
    started[i] = pthread_create(&threads[i], 0, fill_span, &parts[i]) == 0;
  pthread_sigmask(SIG_SETMASK, &old, 0);
  fill_span(&parts[0]);
  for (int i = 1; i < n; ++i) {
    if (started[i])
      pthread_join(threads[i], 0);
    else
      fill_span(&parts[i]);
  }
}

/* size bytes (a multiple of HUGE_PAGE) of fresh pages starting on a huge page: a mapping one
 * huge page longer, its unaligned head and tail unmapped; 0 when there is no memory. */
static void* map_aligned(size_t size) {
  char* p = mmap(0, size + HUGE_PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return 0;
  char* start = (char*)(((uintptr_t)p + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1));
  if (start > p) munmap(p, (size_t)(start - p));
  size_t tail = (size_t)(p + size + HUGE_PAGE - (start + size));
  if (tail) munmap(start + size, tail);
  return start;
}

int posix_memalign(void** out, size_t alignment, size_t size) {
  /* alignment up to a huge page (torch asks for 4 KiB): every block here starts on one */
  if (!real_posix_memalign) resolve();
  if (size < LARGE || alignment > HUGE_PAGE || !real_posix_memalign) {
    if (!real_posix_memalign) return ENOMEM;
    return real_posix_memalign(out, alignment, size);
  }
  if (alignment < sizeof(void*) || (alignment & (alignment - 1))) return EINVAL;
  if (size > SIZE_MAX - 2 * HUGE_PAGE) return ENOMEM; /* rounded up below, it would wrap */
  size_t mapped = (size + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE;
  pthread_mutex_lock(&lock);
  if (n_live == MAX_LIVE) {
    pthread_mutex_unlock(&lock);
    return real_posix_memalign(out, alignment, size);
  }
  block b = {0, 0};
  if (kept.addr && kept.size >= mapped &&
      mprotect(kept.addr, mapped, PROT_READ | PROT_WRITE) == 0) {
    /* warm pages: the request is carved from the kept block's front, readable again (the
     * rest stays kept and unreadable); both parts are huge-page aligned, each unmapped on its
     * own */
    b.addr = kept.addr;
    b.size = mapped;
    kept.addr = kept.size > mapped ? (char*)kept.addr + mapped : 0;
    kept.size -= mapped;
  } else {
    if (kept.addr) munmap(kept.addr, kept.size); /* never hold a block too small for what comes */
    kept.addr = 0;
    kept.size = 0;
    void* p = map_aligned(mapped);
    if (!p) {
      pthread_mutex_unlock(&lock);
      return ENOMEM;
    }
    /* no MADV_HUGEPAGE: a fresh huge page must come from the large free blocks that the guest
     * reports to its host, and faulting them in cost 2.1 s per GB here (direct compaction,
     * host faults), against 0.34 s per GB for ordinary pages; a kept block is warm either way */
    b.addr = p;
    b.size = mapped;
  }
  live[n_live] = b;
  __atomic_store_n(&n_live, n_live + 1, __ATOMIC_RELEASE); /* read unlocked by free */
  pthread_mutex_unlock(&lock);
  /* poisoned, carved or fresh (outside the lock): a kernel that leaves elements unwritten must
   * find NaN there, never zeros (fresh pages) or the last call's results (a racy backward that
   * skips some would pass determinism); all of it, as realloc copies up to its size */
  fill_block(b.addr, b.size);
  *out = b.addr;
  return 0;
}

/* Take p out of the live list and keep or unmap it; 0 when p is not a large block. */
static int release_large(void* p) {
  if (!__atomic_load_n(&n_live, __ATOMIC_ACQUIRE)) return 0;
  pthread_mutex_lock(&lock);
  int i = find_live(p);
  if (i < 0) {
    pthread_mutex_unlock(&lock);
    return 0;
  }
  block b = live[i];
  live[i] = live[n_live - 1];
  __atomic_store_n(&n_live, n_live - 1, __ATOMIC_RELEASE);
  /* kept only when larger than the block kept now, and only unreadable: a use after free must
   * fault as on the block glibc would have unmapped, not read the freed values */
  if ((!kept.addr || b.size > kept.size) && mprotect(b.addr, b.size, PROT_NONE) == 0) {
    if (kept.addr) munmap(kept.addr, kept.size);
    kept = b;
  } else {
    munmap(b.addr, b.size);
  }
  pthread_mutex_unlock(&lock);
  return 1;
}

void free(void* p) {
  if (!p || release_large(p)) return;
  if (!real_free) resolve();
  if (real_free) real_free(p); /* (NULL only inside dlsym: leak, never crash) */
}

static size_t large_size(void* p) {
  size_t size = 0;
  if (!__atomic_load_n(&n_live, __ATOMIC_ACQUIRE)) return 0;
  pthread_mutex_lock(&lock);
  int i = find_live(p);
  if (i >= 0) size = live[i].size;
  pthread_mutex_unlock(&lock);
  return size;
}

void* realloc(void* p, size_t size) {
  size_t old = p ? large_size(p) : 0;
  if (!real_realloc) resolve();
  if (!old) return real_realloc ? real_realloc(p, size) : 0;
  void* q = malloc(size);
  if (!q) return 0;
  memcpy(q, p, old < size ? old : size);
  free(p);
  return q;
}

size_t malloc_usable_size(void* p) {
  size_t size = p ? large_size(p) : 0;
  if (!size && !real_usable_size) resolve();
  return size ? size : (real_usable_size ? real_usable_size(p) : 0);
}

/* A fork while another thread holds the lock must not leave the child's free() stuck. */
static void before_fork(void) { pthread_mutex_lock(&lock); }
static void after_fork(void) { pthread_mutex_unlock(&lock); }
__attribute__((constructor)) static void fork_safe(void) {
  pthread_atfork(before_fork, after_fork, after_fork);
}

/* A simulated GPU for TensorFlow: a PluggableDevice plugin for tests.
 *
 * It registers a StreamExecutor platform of type "GPU" whose "device memory"
 * is ordinary process memory obtained with mmap(MAP_NORESERVE), so a 16 GiB
 * device costs no RAM until it is written. TensorFlow manages it with its own
 * BFC allocator (use_bfc_allocator = 1), exactly as it manages a CUDA GPU, so
 * visibility, memory growth, caps, logical devices, OOM and get_memory_info
 * all run through TensorFlow's real code. Streams, events and timers are
 * synchronous no-ops. One kernel is registered: Fill on "GPU", so that
 * tf.zeros / tf.ones / tf.fill produce tensors on the simulated device.
 *
 * Environment (read once, when TensorFlow loads the plugin):
 *   SIMGPU_COUNT      number of devices (default: 1, or the length of the
 *                     SIMGPU_MEMORY_MB list). 0 is allowed.
 *   SIMGPU_MEMORY_MB  MiB per device: one number for every device (default
 *                     16384) or a comma-separated list, one per device.
 *   SIMGPU_RECORD     optional path; the allocation record (JSON, below) is
 *                     rewritten atomically there after every device
 *                     allocation or free, and once more at unload.
 *   SIMGPU_NAMESPACE  names the shared accounting segments (default
 *                     "uid<uid>"): processes with the same namespace share
 *                     each device, as processes share a CUDA GPU.
 *
 * Shared accounting: each device's used bytes live in a POSIX shared-memory
 * segment, /dev/shm/simgpu-<namespace>-<ordinal>, so an allocation is refused
 * once every process's holdings together reach the device total, and the free
 * memory the device reports counts every process. The segment holds a table
 * of holders (pid, process start time, bytes, peak) under a process-shared
 * robust mutex. Whoever takes the mutex first drops holders whose process is
 * gone (no /proc entry, a zombie, or a reused pid with another start time),
 * so a crashed process's memory returns to the device; a holder that died
 * while holding the mutex leaves it to the next owner (EOWNERDEAD), which
 * recomputes the totals from the table. A process clears its own entry at
 * unload. Device memory itself stays private to each process; only the
 * accounting is shared. The segment stays after the last process exits (a
 * few KiB) and is re-sized by the next process that finds it idle.
 *
 * Allocation record:
 *   {"pid": P, "devices": [{"ordinal": 0, "total_bytes": T,
 *     "allocations": N, "frees": F, "refused": R,
 *     "first_allocation_bytes": B, "largest_allocation_bytes": L,
 *     "current_bytes": C, "peak_bytes": K, "sizes": [first 64 sizes]}, ...]}
 *
 * Build: see build.py next to this file.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "tensorflow/c/experimental/stream_executor/stream_executor.h"
#include "tensorflow/c/kernels.h"
#include "tensorflow/c/tf_datatype.h"
#include "tensorflow/c/tf_status.h"
#include "tensorflow/c/tf_tensor.h"

#define SIM_MAX_DEVICES 16
#define SIM_MAX_SIZES 64
#define SIM_DEFAULT_MB 16384
#define SIM_HOST_ALIGN 256
#define SIM_SHM_MAGIC 0x31555047474d4953ull /* "SIMGGPU1" */
#define SIM_SHM_HOLDERS 64
#define SIM_NAMESPACE_MAX 64

/* ------------------------------------------------------------------------ */
/* Device state and the allocation record                                    */
/* ------------------------------------------------------------------------ */

typedef struct Region {
  void* ptr;
  uint64_t size;
  struct Region* next;
} Region;

/* One process attached to a shared device, and what it holds there. */
typedef struct ShmHolder {
  int32_t pid; /* 0: a free entry */
  uint32_t unused;
  uint64_t start; /* start time in clock ticks since boot: tells a reused pid apart */
  uint64_t bytes;
  uint64_t peak;
} ShmHolder;

/* A device's shared accounting. tests/simgpu/segment.py reads this layout:
 * keep the two in step. */
typedef struct ShmDevice {
  uint64_t magic; /* written last, once the mutex is initialised */
  uint64_t total;
  uint64_t used;              /* sum of the holders' bytes */
  uint64_t peak;              /* most held at once since the device was idle */
  uint64_t reclaimed_bytes;   /* taken back from processes that died */
  uint64_t reclaimed_holders; /* how many such processes */
  uint64_t unused[2];
  union {
    pthread_mutex_t mutex;
    char pad[64];
  } lock;
  ShmHolder holders[SIM_SHM_HOLDERS];
} ShmDevice;

_Static_assert(sizeof(pthread_mutex_t) <= 64, "the mutex fits its slot");
_Static_assert(sizeof(ShmHolder) == 32, "holder layout");

typedef struct SimDevice {
  int ordinal;
  uint64_t total;
  ShmDevice* shm;     /* NULL once detached at unload */
  ShmHolder* holder;  /* this process's entry in shm */
  uint64_t current;
  uint64_t peak;
  uint64_t first;
  uint64_t largest;
  int64_t allocations;
  int64_t frees;
  int64_t refused;
  int nsizes;
  uint64_t sizes[SIM_MAX_SIZES];
  Region* regions;
  char pci_bus_id[32];
} SimDevice;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static int g_count = 0;
static SimDevice g_devices[SIM_MAX_DEVICES];
static char g_record_path[4096];
static char g_namespace[SIM_NAMESPACE_MAX + 1];

/* ------------------------------------------------------------------------ */
/* Shared accounting (see the top of this file)                              */
/* ------------------------------------------------------------------------ */

/* Start time (clock ticks since boot) of a live process, or 0 when it is gone
 * or a zombie. Field 22 of /proc/PID/stat, counted after the ")" that closes
 * the command name (which may itself hold spaces and parentheses). */
static uint64_t sim_process_start(int pid) {
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/%d/stat", pid);
  FILE* f = fopen(path, "r");
  if (f == NULL) return 0;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  char* p = strrchr(buf, ')');
  if (p == NULL || p[1] != ' ' || p[2] == 'Z' || p[2] == 'X') return 0;
  p += 2; /* field 3, the state */
  for (int field = 3; field < 22 && p != NULL; field++) {
    p = strchr(p, ' ');
    if (p != NULL) p++;
  }
  return p == NULL ? 0 : strtoull(p, NULL, 10);
}

/* Drop holders whose process is gone; recompute the used total from the
 * table (so a holder that died mid-update leaves nothing inconsistent). */
static void shm_sweep_locked(ShmDevice* s) {
  int self = (int)getpid();
  uint64_t used = 0;
  for (int i = 0; i < SIM_SHM_HOLDERS; i++) {
    ShmHolder* h = &s->holders[i];
    if (h->pid == 0) continue;
    if (h->pid != self && sim_process_start(h->pid) != h->start) {
      if (h->bytes != 0) {
        s->reclaimed_bytes += h->bytes;
        s->reclaimed_holders++;
      }
      memset(h, 0, sizeof *h);
      continue;
    }
    used += h->bytes;
  }
  s->used = used;
}

static void shm_lock(ShmDevice* s) {
  if (pthread_mutex_lock(&s->lock.mutex) == EOWNERDEAD) {
    pthread_mutex_consistent(&s->lock.mutex);
  }
  shm_sweep_locked(s);
}

static void shm_unlock(ShmDevice* s) { pthread_mutex_unlock(&s->lock.mutex); }

/* Open (or create) the segment called `name`; NULL with `msg` set on error. */
static ShmDevice* shm_map(const char* name, char* msg, size_t msglen) {
  int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
  int created = fd >= 0;
  if (!created && errno == EEXIST) fd = shm_open(name, O_RDWR, 0);
  if (fd < 0 || (created && ftruncate(fd, sizeof(ShmDevice)) != 0)) {
    snprintf(msg, msglen, "simgpu: shared segment %s: %s", name, strerror(errno));
    if (fd >= 0) close(fd);
    return NULL;
  }
  /* Another process may have created it a moment ago: wait (up to 5 s) for
   * its size and then its magic, which is written last. */
  struct stat st;
  for (int i = 0; i < 500 && fstat(fd, &st) == 0 && st.st_size < (off_t)sizeof(ShmDevice);
       i++) {
    usleep(10000);
  }
  ShmDevice* s = NULL;
  if (fstat(fd, &st) == 0 && st.st_size >= (off_t)sizeof(ShmDevice)) {
    s = mmap(NULL, sizeof *s, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (s == MAP_FAILED) s = NULL;
  }
  close(fd);
  if (s != NULL && created) {
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
    pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
    pthread_mutex_init(&s->lock.mutex, &attr);
    pthread_mutexattr_destroy(&attr);
    __atomic_store_n(&s->magic, SIM_SHM_MAGIC, __ATOMIC_RELEASE);
  }
  for (int i = 0; s != NULL && i < 500; i++) {
    if (__atomic_load_n(&s->magic, __ATOMIC_ACQUIRE) == SIM_SHM_MAGIC) return s;
    usleep(10000);
  }
  if (s != NULL) munmap(s, sizeof *s);
  snprintf(msg, msglen,
           "simgpu: shared segment %s is not a simulated-GPU segment of this "
           "version; remove /dev/shm%s",
           name, name);
  return NULL;
}

/* Attach device `d` to its shared segment and take a holder entry. An idle
 * device (no live holder) takes this process's size; a busy one must match. */
static const char* shm_attach(SimDevice* d) {
  static char msg[512];
  char name[SIM_NAMESPACE_MAX + 32];
  snprintf(name, sizeof name, "/simgpu-%s-%d", g_namespace, d->ordinal);
  ShmDevice* s = shm_map(name, msg, sizeof msg);
  if (s == NULL) return msg;
  const char* err = NULL;
  ShmHolder* mine = NULL;
  shm_lock(s);
  int busy = 0;
  for (int i = 0; i < SIM_SHM_HOLDERS; i++) {
    if (s->holders[i].pid != 0) busy = s->holders[i].pid;
    else if (mine == NULL) mine = &s->holders[i];
  }
  if (busy == 0) {
    s->total = d->total;
    s->peak = 0;
  } else if (s->total != d->total) {
    snprintf(msg, sizeof msg,
             "simgpu: device %d of SIMGPU_NAMESPACE=%s is in use as %llu MiB "
             "(pid %d); SIMGPU_MEMORY_MB asks for %llu MiB",
             d->ordinal, g_namespace, (unsigned long long)(s->total >> 20), busy,
             (unsigned long long)(d->total >> 20));
    err = msg;
  }
  if (err == NULL && mine == NULL) {
    snprintf(msg, sizeof msg, "simgpu: device %d of SIMGPU_NAMESPACE=%s has %d processes already",
             d->ordinal, g_namespace, SIM_SHM_HOLDERS);
    err = msg;
  }
  if (err == NULL) {
    mine->pid = (int32_t)getpid();
    mine->start = sim_process_start(mine->pid);
    d->shm = s;
    d->holder = mine;
  }
  shm_unlock(s);
  if (err != NULL) munmap(s, sizeof *s);
  return err;
}

/* Count `size` more bytes against the device, if every process's holdings
 * leave room for them. Returns 1 when counted. */
static int shm_take(SimDevice* d, uint64_t size) {
  ShmDevice* s = d->shm;
  if (s == NULL) return size <= d->total - d->current; /* after unload */
  shm_lock(s);
  int ok = size <= s->total - s->used;
  if (ok) {
    d->holder->bytes += size;
    s->used += size;
    if (d->holder->bytes > d->holder->peak) d->holder->peak = d->holder->bytes;
    if (s->used > s->peak) s->peak = s->used;
  }
  shm_unlock(s);
  return ok;
}

static void shm_give(SimDevice* d, uint64_t size) {
  ShmDevice* s = d->shm;
  if (s == NULL) return;
  shm_lock(s);
  d->holder->bytes -= size;
  s->used -= size;
  shm_unlock(s);
}

/* At unload: hand back everything this process holds and leave the table.
 * A forked child shares its parent's entry and leaves it alone. */
static void shm_detach(SimDevice* d) {
  ShmDevice* s = d->shm;
  if (s == NULL) return;
  shm_lock(s);
  if (d->holder->pid == (int32_t)getpid()) {
    s->used -= d->holder->bytes;
    memset(d->holder, 0, sizeof *d->holder);
  }
  shm_unlock(s);
  d->shm = NULL;
  d->holder = NULL;
  munmap(s, sizeof *s);
}

/* Device memory still free, counting every process's holdings. */
static uint64_t shm_free(SimDevice* d) {
  ShmDevice* s = d->shm;
  if (s == NULL) return d->total - d->current; /* after unload */
  shm_lock(s);
  uint64_t left = s->total - s->used;
  shm_unlock(s);
  return left;
}

/* Parse SIMGPU_COUNT / SIMGPU_MEMORY_MB into g_devices. Returns an error
 * message, or NULL on success. */
static const char* sim_configure(void) {
  static char msg[256];
  uint64_t mb[SIM_MAX_DEVICES];
  int nmb = 0;
  const char* sizes = getenv("SIMGPU_MEMORY_MB");
  if (sizes == NULL || *sizes == '\0') sizes = "16384";
  const char* p = sizes;
  while (*p) {
    char* end = NULL;
    errno = 0;
    unsigned long long v = strtoull(p, &end, 10);
    if (end == p || errno != 0 || v == 0 || nmb == SIM_MAX_DEVICES) {
      snprintf(msg, sizeof msg,
               "simgpu: SIMGPU_MEMORY_MB=%s: expected positive MiB sizes, "
               "at most %d, separated by commas",
               sizes, SIM_MAX_DEVICES);
      return msg;
    }
    mb[nmb++] = (uint64_t)v;
    p = end;
    if (*p == ',') p++;
    else if (*p != '\0') {
      snprintf(msg, sizeof msg, "simgpu: SIMGPU_MEMORY_MB=%s: bad separator",
               sizes);
      return msg;
    }
  }
  int count = nmb > 1 ? nmb : 1;
  const char* cs = getenv("SIMGPU_COUNT");
  if (cs != NULL && *cs != '\0') {
    char* end = NULL;
    long c = strtol(cs, &end, 10);
    if (*end != '\0' || c < 0 || c > SIM_MAX_DEVICES ||
        (nmb > 1 && c != nmb)) {
      snprintf(msg, sizeof msg,
               "simgpu: SIMGPU_COUNT=%s: expected 0..%d, matching the "
               "SIMGPU_MEMORY_MB list length when that is a list",
               cs, SIM_MAX_DEVICES);
      return msg;
    }
    count = (int)c;
  }
  g_count = count;
  for (int i = 0; i < count; i++) {
    SimDevice* d = &g_devices[i];
    memset(d, 0, sizeof *d);
    d->ordinal = i;
    d->total = (nmb > 1 ? mb[i] : mb[0]) << 20;
    snprintf(d->pci_bus_id, sizeof d->pci_bus_id, "0000:00:%02x.0", i + 1);
  }
  const char* rec = getenv("SIMGPU_RECORD");
  if (rec != NULL) {
    snprintf(g_record_path, sizeof g_record_path, "%s", rec);
  }
  const char* ns = getenv("SIMGPU_NAMESPACE");
  if (ns == NULL || *ns == '\0') {
    snprintf(g_namespace, sizeof g_namespace, "uid%u", (unsigned)getuid());
  } else if (strlen(ns) > SIM_NAMESPACE_MAX ||
             strspn(ns, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                        "0123456789._") != strlen(ns)) {
    snprintf(msg, sizeof msg,
             "simgpu: SIMGPU_NAMESPACE: expected at most %d letters, digits, "
             "'.' or '_'",
             SIM_NAMESPACE_MAX);
    return msg;
  } else {
    snprintf(g_namespace, sizeof g_namespace, "%s", ns);
  }
  for (int i = 0; i < count; i++) {
    const char* err = shm_attach(&g_devices[i]);
    if (err != NULL) return err;
  }
  return NULL;
}

/* Rewrite the record file (caller holds g_lock). Written to a temporary
 * file and renamed, so a reader never sees a half-written record. */
static void sim_write_record_locked(void) {
  if (g_record_path[0] == '\0') return;
  char tmp[4200];
  snprintf(tmp, sizeof tmp, "%s.tmp%d", g_record_path, (int)getpid());
  FILE* f = fopen(tmp, "w");
  if (f == NULL) return;
  fprintf(f, "{\"pid\": %d, \"devices\": [", (int)getpid());
  for (int i = 0; i < g_count; i++) {
    const SimDevice* d = &g_devices[i];
    fprintf(f,
            "%s{\"ordinal\": %d, \"total_bytes\": %llu, \"allocations\": %lld, "
            "\"frees\": %lld, \"refused\": %lld, "
            "\"first_allocation_bytes\": %llu, "
            "\"largest_allocation_bytes\": %llu, \"current_bytes\": %llu, "
            "\"peak_bytes\": %llu, \"sizes\": [",
            i ? ", " : "", d->ordinal, (unsigned long long)d->total,
            (long long)d->allocations, (long long)d->frees,
            (long long)d->refused, (unsigned long long)d->first,
            (unsigned long long)d->largest, (unsigned long long)d->current,
            (unsigned long long)d->peak);
    for (int j = 0; j < d->nsizes; j++) {
      fprintf(f, "%s%llu", j ? ", " : "", (unsigned long long)d->sizes[j]);
    }
    fprintf(f, "]}");
  }
  fprintf(f, "]}\n");
  if (fclose(f) == 0) rename(tmp, g_record_path);
  else unlink(tmp);
}

__attribute__((destructor)) static void sim_write_record_at_exit(void) {
  pthread_mutex_lock(&g_lock);
  sim_write_record_locked();
  for (int i = 0; i < g_count; i++) shm_detach(&g_devices[i]);
  pthread_mutex_unlock(&g_lock);
}

static SimDevice* sim_device(const SP_Device* device) {
  return (SimDevice*)device->device_handle;
}

/* ------------------------------------------------------------------------ */
/* Memory                                                                    */
/* ------------------------------------------------------------------------ */

/* Zero a range of device memory. Whole pages are handed back to the kernel
 * with MADV_DONTNEED (private anonymous pages then read as zero), so zeroing
 * gigabytes costs neither time nor RAM. */
static void sim_zero(void* dst, uint64_t size) {
  uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
  uintptr_t start = (uintptr_t)dst;
  uintptr_t end = start + size;
  uintptr_t a = (start + page - 1) & ~(page - 1);
  uintptr_t b = end & ~(page - 1);
  if (b > a && madvise((void*)a, b - a, MADV_DONTNEED) == 0) {
    memset(dst, 0, a - start);
    memset((void*)b, 0, end - b);
  } else {
    memset(dst, 0, size);
  }
}

/* Fill `size` bytes with copies of the `elem`-byte pattern `value`. */
static void sim_fill(void* dst, uint64_t size, const void* value, size_t elem) {
  if (size == 0 || elem == 0) return;
  int zero = 1;
  for (size_t i = 0; i < elem; i++) {
    if (((const unsigned char*)value)[i] != 0) zero = 0;
  }
  if (zero) {
    sim_zero(dst, size);
    return;
  }
  char* out = (char*)dst;
  uint64_t done = elem < size ? elem : size;
  memcpy(out, value, done);
  while (done < size) {
    uint64_t n = done < size - done ? done : size - done;
    memcpy(out + done, out, n);
    done += n;
  }
}

static void sim_allocate(const SP_Device* device, uint64_t size,
                         int64_t memory_space, SP_DeviceMemoryBase* mem) {
  (void)memory_space;
  SimDevice* d = sim_device(device);
  mem->struct_size = SP_DEVICE_MEMORY_BASE_STRUCT_SIZE;
  mem->opaque = NULL;
  mem->size = 0;
  if (size == 0) return;
  pthread_mutex_lock(&g_lock);
  if (!shm_take(d, size)) {
    d->refused++;
    sim_write_record_locked();
    pthread_mutex_unlock(&g_lock);
    return;
  }
  void* ptr = mmap(NULL, size, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  Region* r = ptr == MAP_FAILED ? NULL : malloc(sizeof *r);
  if (r == NULL) {
    if (ptr != MAP_FAILED) munmap(ptr, size);
    shm_give(d, size);
    d->refused++;
    sim_write_record_locked();
    pthread_mutex_unlock(&g_lock);
    return;
  }
  r->ptr = ptr;
  r->size = size;
  r->next = d->regions;
  d->regions = r;
  if (d->allocations == 0) d->first = size;
  if (d->nsizes < SIM_MAX_SIZES) d->sizes[d->nsizes++] = size;
  d->allocations++;
  d->current += size;
  if (d->current > d->peak) d->peak = d->current;
  if (size > d->largest) d->largest = size;
  sim_write_record_locked();
  pthread_mutex_unlock(&g_lock);
  mem->opaque = ptr;
  mem->size = size;
  mem->payload = size;
}

static void sim_deallocate(const SP_Device* device, SP_DeviceMemoryBase* mem) {
  SimDevice* d = sim_device(device);
  if (mem == NULL || mem->opaque == NULL) return;
  pthread_mutex_lock(&g_lock);
  Region** link = &d->regions;
  while (*link != NULL && (*link)->ptr != mem->opaque) link = &(*link)->next;
  Region* r = *link;
  if (r != NULL) {
    *link = r->next;
    munmap(r->ptr, r->size);
    shm_give(d, r->size);
    d->current -= r->size;
    d->frees++;
    free(r);
    sim_write_record_locked();
  }
  pthread_mutex_unlock(&g_lock);
  mem->opaque = NULL;
  mem->size = 0;
}

static void* sim_host_allocate(const SP_Device* device, uint64_t size) {
  (void)device;
  void* ptr = NULL;
  if (posix_memalign(&ptr, SIM_HOST_ALIGN, size ? size : 1) != 0) return NULL;
  return ptr;
}

static void sim_host_deallocate(const SP_Device* device, void* mem) {
  (void)device;
  free(mem);
}

static TF_Bool sim_allocator_stats(const SP_Device* device,
                                   SP_AllocatorStats* stats) {
  SimDevice* d = sim_device(device);
  pthread_mutex_lock(&g_lock);
  stats->struct_size = SP_ALLOCATORSTATS_STRUCT_SIZE;
  stats->num_allocs = d->allocations;
  stats->bytes_in_use = (int64_t)d->current;
  stats->peak_bytes_in_use = (int64_t)d->peak;
  stats->largest_alloc_size = (int64_t)d->largest;
  stats->has_bytes_limit = 1;
  stats->bytes_limit = (int64_t)d->total;
  pthread_mutex_unlock(&g_lock);
  return 1;
}

static TF_Bool sim_memory_usage(const SP_Device* device, int64_t* free_bytes,
                                int64_t* total_bytes) {
  SimDevice* d = sim_device(device);
  pthread_mutex_lock(&g_lock);
  *free_bytes = (int64_t)shm_free(d);
  *total_bytes = (int64_t)d->total;
  pthread_mutex_unlock(&g_lock);
  return 1;
}

/* ------------------------------------------------------------------------ */
/* Streams, events, timers: everything completes synchronously               */
/* ------------------------------------------------------------------------ */

struct SP_Stream_st { int unused; };
struct SP_Event_st { int unused; };
struct SP_Timer_st { uint64_t start_ns, stop_ns; };

static uint64_t sim_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void sim_create_stream(const SP_Device* device, SP_Stream* stream,
                              TF_Status* status) {
  (void)device;
  *stream = calloc(1, sizeof **stream);
  if (*stream == NULL) TF_SetStatus(status, TF_RESOURCE_EXHAUSTED, "stream");
}

static void sim_destroy_stream(const SP_Device* device, SP_Stream stream) {
  (void)device;
  free(stream);
}

static void sim_stream_ok(const SP_Device* device, SP_Stream a, SP_Stream b,
                          TF_Status* status) {
  (void)device, (void)a, (void)b;
  TF_SetStatus(status, TF_OK, "");
}

static void sim_stream_status(const SP_Device* device, SP_Stream stream,
                              TF_Status* status) {
  (void)device, (void)stream;
  TF_SetStatus(status, TF_OK, "");
}

static void sim_create_event(const SP_Device* device, SP_Event* event,
                             TF_Status* status) {
  (void)device;
  *event = calloc(1, sizeof **event);
  if (*event == NULL) TF_SetStatus(status, TF_RESOURCE_EXHAUSTED, "event");
}

static void sim_destroy_event(const SP_Device* device, SP_Event event) {
  (void)device;
  free(event);
}

static SE_EventStatus sim_event_status(const SP_Device* device,
                                       SP_Event event) {
  (void)device, (void)event;
  return SE_EVENT_COMPLETE;
}

static void sim_event_on_stream(const SP_Device* device, SP_Stream stream,
                                SP_Event event, TF_Status* status) {
  (void)device, (void)stream, (void)event;
  TF_SetStatus(status, TF_OK, "");
}

static void sim_create_timer(const SP_Device* device, SP_Timer* timer,
                             TF_Status* status) {
  (void)device;
  *timer = calloc(1, sizeof **timer);
  if (*timer == NULL) TF_SetStatus(status, TF_RESOURCE_EXHAUSTED, "timer");
}

static void sim_destroy_timer(const SP_Device* device, SP_Timer timer) {
  (void)device;
  free(timer);
}

static void sim_start_timer(const SP_Device* device, SP_Stream stream,
                            SP_Timer timer, TF_Status* status) {
  (void)device, (void)stream;
  timer->start_ns = timer->stop_ns = sim_now_ns();
  TF_SetStatus(status, TF_OK, "");
}

static void sim_stop_timer(const SP_Device* device, SP_Stream stream,
                           SP_Timer timer, TF_Status* status) {
  (void)device, (void)stream;
  timer->stop_ns = sim_now_ns();
  TF_SetStatus(status, TF_OK, "");
}

static uint64_t sim_timer_ns(SP_Timer timer) {
  return timer->stop_ns - timer->start_ns;
}

static void sim_block_event(const SP_Device* device, SP_Event event,
                            TF_Status* status) {
  (void)device, (void)event;
  TF_SetStatus(status, TF_OK, "");
}

static void sim_block_stream(const SP_Device* device, SP_Stream stream,
                             TF_Status* status) {
  (void)device, (void)stream;
  TF_SetStatus(status, TF_OK, "");
}

static void sim_sync_all(const SP_Device* device, TF_Status* status) {
  (void)device;
  TF_SetStatus(status, TF_OK, "");
}

static TF_Bool sim_host_callback(const SP_Device* device, SP_Stream stream,
                                 SE_StatusCallbackFn fn, void* arg) {
  (void)device, (void)stream;
  TF_Status* status = TF_NewStatus();
  fn(arg, status);
  TF_DeleteStatus(status);
  return 1;
}

/* ------------------------------------------------------------------------ */
/* Copies and memsets: device memory is host-addressable                     */
/* ------------------------------------------------------------------------ */

static void sim_dtoh(const SP_Device* device, SP_Stream stream, void* dst,
                     const SP_DeviceMemoryBase* src, uint64_t size,
                     TF_Status* status) {
  (void)device, (void)stream;
  if (size) memcpy(dst, src->opaque, size);
  TF_SetStatus(status, TF_OK, "");
}

static void sim_htod(const SP_Device* device, SP_Stream stream,
                     SP_DeviceMemoryBase* dst, const void* src, uint64_t size,
                     TF_Status* status) {
  (void)device, (void)stream;
  if (size) memcpy(dst->opaque, src, size);
  TF_SetStatus(status, TF_OK, "");
}

static void sim_dtod(const SP_Device* device, SP_Stream stream,
                     SP_DeviceMemoryBase* dst, const SP_DeviceMemoryBase* src,
                     uint64_t size, TF_Status* status) {
  (void)device, (void)stream;
  if (size) memmove(dst->opaque, src->opaque, size);
  TF_SetStatus(status, TF_OK, "");
}

static void sim_sync_dtoh(const SP_Device* device, void* dst,
                          const SP_DeviceMemoryBase* src, uint64_t size,
                          TF_Status* status) {
  sim_dtoh(device, NULL, dst, src, size, status);
}

static void sim_sync_htod(const SP_Device* device, SP_DeviceMemoryBase* dst,
                          const void* src, uint64_t size, TF_Status* status) {
  sim_htod(device, NULL, dst, src, size, status);
}

static void sim_sync_dtod(const SP_Device* device, SP_DeviceMemoryBase* dst,
                          const SP_DeviceMemoryBase* src, uint64_t size,
                          TF_Status* status) {
  sim_dtod(device, NULL, dst, src, size, status);
}

static void sim_mem_zero(const SP_Device* device, SP_Stream stream,
                         SP_DeviceMemoryBase* location, uint64_t size,
                         TF_Status* status) {
  (void)device, (void)stream;
  sim_zero(location->opaque, size);
  TF_SetStatus(status, TF_OK, "");
}

static void sim_memset(const SP_Device* device, SP_Stream stream,
                       SP_DeviceMemoryBase* location, uint8_t pattern,
                       uint64_t size, TF_Status* status) {
  (void)device, (void)stream;
  sim_fill(location->opaque, size, &pattern, 1);
  TF_SetStatus(status, TF_OK, "");
}

static void sim_memset32(const SP_Device* device, SP_Stream stream,
                         SP_DeviceMemoryBase* location, uint32_t pattern,
                         uint64_t size, TF_Status* status) {
  (void)device, (void)stream;
  sim_fill(location->opaque, size, &pattern, sizeof pattern);
  TF_SetStatus(status, TF_OK, "");
}

#ifdef SP_STREAM_OPTIONS_STRUCT_SIZE
/* Newer headers: streams with a priority. Priorities mean nothing here. */
static void sim_create_stream_with_options(const SP_Device* device,
                                           const SP_StreamOptions* options,
                                           SP_Stream* stream,
                                           TF_Status* status) {
  (void)options;
  sim_create_stream(device, stream, status);
}
#endif

/* ------------------------------------------------------------------------ */
/* Platform                                                                  */
/* ------------------------------------------------------------------------ */

static void sim_device_count(const SP_Platform* platform, int* count,
                             TF_Status* status) {
  (void)platform;
  *count = g_count;
  TF_SetStatus(status, TF_OK, "");
}

static void sim_create_device(const SP_Platform* platform,
                              SE_CreateDeviceParams* params,
                              TF_Status* status) {
  (void)platform;
  if (params->ordinal < 0 || params->ordinal >= g_count) {
    TF_SetStatus(status, TF_INVALID_ARGUMENT, "simgpu: no such device");
    return;
  }
  SimDevice* d = &g_devices[params->ordinal];
  params->device->struct_size = SP_DEVICE_STRUCT_SIZE;
  params->device->ordinal = params->ordinal;
  params->device->device_handle = d;
  params->device->hardware_name = "SimGPU";
  params->device->device_vendor = "tfboot-tests";
  params->device->pci_bus_id = d->pci_bus_id;
  TF_SetStatus(status, TF_OK, "");
}

static void sim_destroy_device(const SP_Platform* platform,
                               SP_Device* device) {
  (void)platform;
  device->device_handle = NULL;
}

static void sim_create_device_fns(const SP_Platform* platform,
                                  SE_CreateDeviceFnsParams* params,
                                  TF_Status* status) {
  (void)platform;
  params->device_fns->struct_size = SP_DEVICE_FNS_STRUCT_SIZE;
  TF_SetStatus(status, TF_OK, "");
}

static void sim_destroy_device_fns(const SP_Platform* platform,
                                   SP_DeviceFns* device_fns) {
  (void)platform, (void)device_fns;
}

static void sim_create_stream_executor(const SP_Platform* platform,
                                       SE_CreateStreamExecutorParams* params,
                                       TF_Status* status) {
  (void)platform;
  SP_StreamExecutor* se = params->stream_executor;
  se->struct_size = SP_STREAMEXECUTOR_STRUCT_SIZE;
  se->allocate = sim_allocate;
  se->deallocate = sim_deallocate;
  se->host_memory_allocate = sim_host_allocate;
  se->host_memory_deallocate = sim_host_deallocate;
  se->get_allocator_stats = sim_allocator_stats;
  se->device_memory_usage = sim_memory_usage;
  se->create_stream = sim_create_stream;
  se->destroy_stream = sim_destroy_stream;
  se->create_stream_dependency = sim_stream_ok;
  se->get_stream_status = sim_stream_status;
  se->create_event = sim_create_event;
  se->destroy_event = sim_destroy_event;
  se->get_event_status = sim_event_status;
  se->record_event = sim_event_on_stream;
  se->wait_for_event = sim_event_on_stream;
  se->create_timer = sim_create_timer;
  se->destroy_timer = sim_destroy_timer;
  se->start_timer = sim_start_timer;
  se->stop_timer = sim_stop_timer;
  se->memcpy_dtoh = sim_dtoh;
  se->memcpy_htod = sim_htod;
  se->memcpy_dtod = sim_dtod;
  se->sync_memcpy_dtoh = sim_sync_dtoh;
  se->sync_memcpy_htod = sim_sync_htod;
  se->sync_memcpy_dtod = sim_sync_dtod;
  se->block_host_for_event = sim_block_event;
  se->block_host_until_done = sim_block_stream;
  se->synchronize_all_activity = sim_sync_all;
  se->mem_zero = sim_mem_zero;
  se->memset = sim_memset;
  se->memset32 = sim_memset32;
  se->host_callback = sim_host_callback;
#ifdef SP_STREAM_OPTIONS_STRUCT_SIZE
  se->create_stream_with_options = sim_create_stream_with_options;
#endif
  TF_SetStatus(status, TF_OK, "");
}

static void sim_destroy_stream_executor(const SP_Platform* platform,
                                        SP_StreamExecutor* se) {
  (void)platform, (void)se;
}

static void sim_create_timer_fns(const SP_Platform* platform,
                                 SP_TimerFns* timer_fns, TF_Status* status) {
  (void)platform;
  timer_fns->struct_size = SP_TIMER_FNS_STRUCT_SIZE;
  timer_fns->nanoseconds = sim_timer_ns;
  TF_SetStatus(status, TF_OK, "");
}

static void sim_destroy_timer_fns(const SP_Platform* platform,
                                  SP_TimerFns* timer_fns) {
  (void)platform, (void)timer_fns;
}

static void sim_destroy_platform(SP_Platform* platform) { (void)platform; }

static void sim_destroy_platform_fns(SP_PlatformFns* fns) { (void)fns; }

void SE_InitPlugin(SE_PlatformRegistrationParams* params, TF_Status* status) {
  const char* err = sim_configure();
  if (err != NULL) {
    TF_SetStatus(status, TF_INVALID_ARGUMENT, err);
    return;
  }
  params->major_version = SE_MAJOR;
  params->minor_version = SE_MINOR;
  params->patch_version = SE_PATCH;
  params->platform->struct_size = SP_PLATFORM_STRUCT_SIZE;
  params->platform->name = "SIMGPU";
  params->platform->type = "GPU";
  params->platform->supports_unified_memory = 0;
  params->platform->use_bfc_allocator = 1;
  params->platform->force_memory_growth = 0;
  SP_PlatformFns* fns = params->platform_fns;
  fns->struct_size = SP_PLATFORM_FNS_STRUCT_SIZE;
  fns->get_device_count = sim_device_count;
  fns->create_device = sim_create_device;
  fns->destroy_device = sim_destroy_device;
  fns->create_device_fns = sim_create_device_fns;
  fns->destroy_device_fns = sim_destroy_device_fns;
  fns->create_stream_executor = sim_create_stream_executor;
  fns->destroy_stream_executor = sim_destroy_stream_executor;
  fns->create_timer_fns = sim_create_timer_fns;
  fns->destroy_timer_fns = sim_destroy_timer_fns;
  params->destroy_platform = sim_destroy_platform;
  params->destroy_platform_fns = sim_destroy_platform_fns;
  pthread_mutex_lock(&g_lock);
  sim_write_record_locked();
  pthread_mutex_unlock(&g_lock);
  TF_SetStatus(status, TF_OK, "");
}

/* ------------------------------------------------------------------------ */
/* Kernel: Fill on "GPU"                                                     */
/* ------------------------------------------------------------------------ */

static void* sim_fill_create(TF_OpKernelConstruction* ctx) {
  (void)ctx;
  return NULL;
}

static void sim_fill_delete(void* kernel) { (void)kernel; }

static void sim_fill_compute(void* kernel, TF_OpKernelContext* ctx) {
  (void)kernel;
  TF_Status* status = TF_NewStatus();
  TF_Tensor* dims = NULL;
  TF_Tensor* value = NULL;
  TF_Tensor* out = NULL;
  int64_t shape[64];
  int rank = 0;
  TF_GetInput(ctx, 0, &dims, status);
  if (TF_GetCode(status) == TF_OK) TF_GetInput(ctx, 1, &value, status);
  if (TF_GetCode(status) == TF_OK) {
    rank = (int)TF_TensorElementCount(dims);
    if (TF_NumDims(dims) != 1 || rank > 64 ||
        TF_TensorElementCount(value) != 1) {
      TF_SetStatus(status, TF_INVALID_ARGUMENT,
                   "Fill: dims must be a vector (rank <= 64), value a scalar");
    }
  }
  if (TF_GetCode(status) == TF_OK) {
    const void* raw = TF_TensorData(dims);
    int wide = TF_TensorType(dims) == TF_INT64;
    size_t elems = 1;
    for (int i = 0; i < rank; i++) {
      shape[i] = wide ? ((const int64_t*)raw)[i] : ((const int32_t*)raw)[i];
      if (shape[i] < 0) {
        TF_SetStatus(status, TF_INVALID_ARGUMENT, "Fill: negative dimension");
        break;
      }
      elems *= (size_t)shape[i];
    }
    if (TF_GetCode(status) == TF_OK) {
      TF_DataType dtype = TF_TensorType(value);
      size_t elem = TF_DataTypeSize(dtype);
      out = TF_AllocateOutput(ctx, 0, dtype, shape, rank, elems * elem, status);
      if (TF_GetCode(status) == TF_OK && elems > 0) {
        sim_fill(TF_TensorData(out), elems * elem, TF_TensorData(value), elem);
      }
    }
  }
  if (TF_GetCode(status) != TF_OK) TF_OpKernelContext_Failure(ctx, status);
  TF_DeleteTensor(out);
  TF_DeleteTensor(value);
  TF_DeleteTensor(dims);
  TF_DeleteStatus(status);
}

void TF_InitKernel(void) {
  /* int32 is left out: TF's DEVICE_DEFAULT Fill<int32> (host memory) serves
   * every device type, and a second registration would clash with it. */
  static const TF_DataType types[] = {TF_FLOAT, TF_DOUBLE, TF_HALF,
                                      TF_BFLOAT16, TF_INT64, TF_INT16,
                                      TF_INT8,  TF_UINT8,  TF_BOOL};
  static const TF_DataType index_types[] = {TF_INT32, TF_INT64};
  TF_Status* status = TF_NewStatus();
  for (size_t t = 0; t < sizeof types / sizeof *types; t++) {
    for (size_t i = 0; i < 2; i++) {
      TF_KernelBuilder* b = TF_NewKernelBuilder(
          "Fill", "GPU", sim_fill_create, sim_fill_compute, sim_fill_delete);
      TF_KernelBuilder_TypeConstraint(b, "T", types[t], status);
      if (TF_GetCode(status) == TF_OK) {
        TF_KernelBuilder_TypeConstraint(b, "index_type", index_types[i],
                                        status);
      }
      TF_KernelBuilder_HostMemory(b, "dims");
      TF_KernelBuilder_HostMemory(b, "value");
      if (TF_GetCode(status) == TF_OK) {
        TF_RegisterKernelBuilder("SimGpuFill", b, status);
      } else {
        TF_DeleteKernelBuilder(b);
      }
      if (TF_GetCode(status) != TF_OK) {
        fprintf(stderr, "simgpu: registering Fill failed: %s\n",
                TF_Message(status));
        TF_SetStatus(status, TF_OK, "");
      }
    }
  }
  TF_DeleteStatus(status);
}

/* A stand-in for the driver's libnvidia-ml, which no machine without an NVIDIA driver has.
   It lists the GPUs named in FAKE_NVML_MIB ("total:used,total:used", MiB); unset, nvmlInit
   fails as the real library does without a driver. FAKE_NVML_PROCS ("index:pid:MiB,...", pid 0
   for the calling process) lists compute processes. FAKE_NVML_LIMITS ("MiB,max,...", by GPU)
   gives MPS memory partitioning's hard limits for the cgroup FAKE_NVML_CGROUP (another
   cgroup's are not found); unset, the GPUs do not support it. Built with -DOLD_DRIVER, the
   library lacks that call, as a driver before 615 does. Only the calls tfboot makes exist. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct { unsigned long long total, free, used; } memory_t;
static unsigned long long totals[64], used[64];
static unsigned count;

int nvmlInit_v2(void) {
    const char *spec = getenv("FAKE_NVML_MIB");
    if (spec == NULL) return 1; /* NVML_ERROR_UNINITIALIZED */
    count = 0;
    while (*spec && count < 64) {
        char *end;
        totals[count] = strtoull(spec, &end, 10) << 20;
        used[count] = (*end == ':') ? strtoull(end + 1, &end, 10) << 20 : 0;
        count++;
        spec = (*end == ',') ? end + 1 : end;
        if (*end != ',' ) break;
    }
    return 0;
}

int nvmlShutdown(void) { return 0; }

int nvmlDeviceGetCount_v2(unsigned *found) { *found = count; return 0; }

int nvmlDeviceGetHandleByIndex_v2(unsigned index, void **handle) {
    if (index >= count) return 2; /* NVML_ERROR_INVALID_ARGUMENT */
    *handle = (void *)(uintptr_t)(index + 1);
    return 0;
}

int nvmlDeviceGetMemoryInfo(void *handle, memory_t *memory) {
    unsigned index = (unsigned)(uintptr_t)handle - 1;
    memory->total = totals[index];
    memory->used = used[index];
    memory->free = totals[index] - used[index];
    return 0;
}

typedef struct {
    unsigned pid;
    unsigned long long usedGpuMemory;
    unsigned gpuInstanceId, computeInstanceId;
} process_t;

int nvmlDeviceGetComputeRunningProcesses_v3(void *handle, unsigned *infoCount, process_t *infos) {
    unsigned index = (unsigned)(uintptr_t)handle - 1, found = 0;
    const char *spec = getenv("FAKE_NVML_PROCS");
    process_t listed[64];
    while (spec && *spec && found < 64) {
        char *end;
        unsigned gpu = (unsigned)strtoul(spec, &end, 10);
        unsigned pid = (*end == ':') ? (unsigned)strtoul(end + 1, &end, 10) : 0;
        unsigned long long mib = (*end == ':') ? strtoull(end + 1, &end, 10) : 0;
        if (gpu == index) {
            listed[found].pid = pid ? pid : (unsigned)getpid();
            listed[found].usedGpuMemory = mib << 20;
            found++;
        }
        if (*end != ',') break;
        spec = end + 1;
    }
    if (*infoCount < found) { *infoCount = found; return 7; } /* NVML_ERROR_INSUFFICIENT_SIZE */
    for (unsigned i = 0; i < found; i++) infos[i] = listed[i];
    *infoCount = found;
    return 0;
}

#ifndef OLD_DRIVER
/* nvmlGetMemoryLimits_v1_t: the NVML reference's fields, in its order */
typedef struct {
    const char *nameSpace;
    unsigned long long softLimit, hardLimit, currentUsed;
} limits_t;

int nvmlDeviceGetMemoryLimits_v1(void *handle, limits_t *limits) {
    unsigned index = (unsigned)(uintptr_t)handle - 1;
    const char *spec = getenv("FAKE_NVML_LIMITS"), *cgroup = getenv("FAKE_NVML_CGROUP");
    if (spec == NULL) return 3; /* NVML_ERROR_NOT_SUPPORTED */
    if (limits->nameSpace == NULL || cgroup == NULL || strcmp(limits->nameSpace, cgroup) != 0)
        return 6; /* NVML_ERROR_NOT_FOUND */
    for (unsigned i = 0; i < index && spec; i++) {
        spec = strchr(spec, ',');
        if (spec) spec++;
    }
    if (spec == NULL) return 6;
    limits->softLimit = 0;
    limits->hardLimit = strncmp(spec, "max", 3) == 0 ? ~0ULL : strtoull(spec, NULL, 10) << 20;
    limits->currentUsed = used[index];
    return 0;
}
#endif

"""The rules of ``tfboot manifests``: each rule's id, severity and one-line summary.

An error fails the run, a warning fails it under ``--strict``, a note never does.
"""

from __future__ import annotations

from ..budget.caps import NCCL_MIB
from ..frameworks import LEAST_MIB

ERROR, WARNING, NOTE = "error", "warning", "note"

RULES: dict[str, tuple[str, str]] = {
    "unreadable": (ERROR, "the input is not valid YAML or JSON"),
    "malformed": (ERROR, "a field has a shape Kubernetes does not accept"),
    "duplicate-key": (ERROR, "a key given twice in one mapping"),
    "no-workloads": (ERROR, "the input holds no workload with a Pod template"),
    "not-checked": (
        NOTE,
        "containers outside any Pod template tfboot reads (Argo, KServe's "
        "model runtimes): neither checked nor injected",
    ),
    "config-invalid": (ERROR, "a tfboot variable has an invalid value"),
    "env-not-string": (ERROR, "an env value is not a string"),
    "memory-auto-without-share": (ERROR, "MEMORY_LIMIT_MB=auto with no GPU-sharing resource"),
    "gpu-memory-over-share": (ERROR, "TensorFlow's GPU memory exceeds the GPU share granted"),
    "gpu-memory-no-headroom": (
        WARNING,
        f"under {LEAST_MIB} MiB ({LEAST_MIB + NCCL_MIB} with NCCL) left below a hard share",
    ),
    "share-below-headroom": (ERROR, "MEMORY_LIMIT_MB=auto under a share at or below the headroom"),
    "share-without-cap": (ERROR, "a share nothing may enforce (gpushare, KAI) without a cap"),
    "kai-share-cap": (NOTE, "the cap MEMORY_LIMIT_MB=auto takes under a KAI Scheduler share"),
    "kai-annotation-invalid": (ERROR, "KAI Scheduler GPU-sharing annotations its binder refuses"),
    "dra-mps-memory-auto": (ERROR, "MEMORY_LIMIT_MB=auto under a DRA MPS limit (not in the env)"),
    "dra-claim-not-found": (NOTE, "a DRA claim not in the inputs: its MPS limit is not checked"),
    "visible-gpu-out-of-range": (ERROR, "a VISIBLE_GPU index the GPU resources do not grant"),
    "split-needs-cap": (ERROR, "VIRTUAL_SPLIT on GPUs that cannot be divided as given"),
    "require-gpu-without-gpu": (ERROR, "REQUIRE_GPU=true with no GPU resource"),
    "gpu-setting-without-gpu": (WARNING, "GPU settings with no GPU resource (ignored at run)"),
    "plan-warning": (WARNING, "tfboot will warn at run time"),
    "tfboot-disabled": (WARNING, "TFBOOT_DISABLE is on: no tfboot variable is applied"),
    "cpu-threads-downward": (ERROR, "CPU_THREADS from the Downward API that is not a core count"),
    "cpu-threads-over-limit": (WARNING, "CPU_THREADS above limits.cpu"),
    "resource-field-extended": (ERROR, "a resourceFieldRef to an extended resource"),
    "resource-field-invalid": (ERROR, "a resourceFieldRef to a resource it cannot expose"),
    "nccl-shm": (WARNING, "several GPUs, or a GPU in a cluster, and the runtime's 64 MiB /dev/shm"),
    "loader-shm": (NOTE, "a PyTorch GPU container, a memory limit, the runtime's 64 MiB /dev/shm"),
    "shm-size-limit": (WARNING, "a memory-backed /dev/shm without sizeLimit"),
    "shm-over-limit": (WARNING, "a memory-backed /dev/shm the memory limit cannot hold"),
    "shm-host": (NOTE, "the node's /dev/shm (hostPath, hostIPC): the node's size, shared"),
    "shm-not-memory": (NOTE, "a /dev/shm on a volume not in memory (disk emptyDir, PVC)"),
    "host-memory-over-limit": (ERROR, "HOST_MEMORY_LIMIT_MB above limits.memory"),
    "pod-level-shared": (NOTE, "a training container on the Pod's memory limit, beside others"),
    "resources-missing": (ERROR, "no cpu or memory limit, nor a request for one"),
    "quantity-invalid": (ERROR, "a resource quantity that does not parse"),
    "requests-over-limits": (ERROR, "a request above its limit"),
    "extended-resource-requests": (ERROR, "an extended resource request unequal to its limit"),
    "run-as-non-root": (ERROR, "the container may run as root"),
    "read-only-root-fs": (ERROR, "readOnlyRootFilesystem is not true"),
    "privilege-escalation": (ERROR, "allowPrivilegeEscalation is not false"),
    "privileged": (ERROR, "the container is privileged"),
    "capabilities-drop-all": (ERROR, "capabilities do not drop ALL"),
    "seccomp-profile": (ERROR, "no RuntimeDefault or Localhost seccomp profile"),
    "image-not-pinned": (ERROR, "the image has no tag, or :latest"),
    "tmp-not-writable": (WARNING, "read-only root filesystem without a volume at /tmp"),
    "inject-incomplete": (ERROR, "an injected container misses the tree or its init container"),
    "inject-mount": (
        ERROR,
        "tfboot's tree is writable outside its copy, not read-only at /tfboot, or has no sizeLimit",
    ),
    "inject-pythonpath": (ERROR, "PYTHONPATH does not start with tfboot's hook"),
    "inject-ignored": (WARNING, "the command runs Python with -I, -E or -S: the hook cannot run"),
    "dist-tasks-count": (ERROR, "DIST_TASKS unequal to the Pods run (completions, parallelism)"),
    "dist-task-index": (ERROR, "no per-Pod task index (not an Indexed Job, or several Jobs)"),
    "dist-tf-config": (ERROR, "DISTRIBUTED=k8s with a TF_CONFIG of its own: stops at import"),
    "dist-hosts": (ERROR, "DIST_HOSTS unequal to the Pods' DNS names"),
    "dist-subdomain": (ERROR, "no subdomain, or no headless Service of that name"),
    "dist-service-selector": (ERROR, "the headless Service does not select the worker Pods"),
    "dist-publish-not-ready": (WARNING, "DNS names published only once a Pod is Ready"),
    "dist-replicas": (ERROR, "DIST_REPLICAS_PER_WORKER unequal to nvidia.com/gpu x the split"),
    "dist-port": (ERROR, "DIST_PORT not among the container's ports"),
    "dist-backoff-limit": (WARNING, "backoffLimit above 0 restarts a lone worker"),
    "jobset-max-restarts": (WARNING, "a JobSet without failurePolicy.maxRestarts"),
    "tfjob-master": (ERROR, "a TFJob Master replica (TensorFlow 2 rejects task type master)"),
    "tfjob-container": (ERROR, "no TFJob container named tensorflow (no TF_CONFIG injected)"),
    "tfjob-distributed": (ERROR, "DISTRIBUTED=k8s or slurm under a TFJob (use auto)"),
}

"""The multi-worker rules: the ``DIST_*`` variables against the objects that run the cluster.

tfboot builds each worker's ``TF_CONFIG`` at import from variables that must agree with
the objects around the Pod: an Indexed Job's completions and parallelism, the headless
Service that names its Pods, a JobSet's replicatedJobs, the GPUs each worker gets, the
container's ports. A Kubeflow TFJob writes ``TF_CONFIG`` itself: there the checks are that
the operator injects it (a container named ``tensorflow``), that TensorFlow accepts it (no
``Master`` replica) and that tfboot only validates it (``DISTRIBUTED=auto``). The values
are parsed by tfboot's own ``cluster.variables``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..cluster.engines import BY_NAME, Engine, detect
from ..cluster.engines.k8s import K8S_PORT, Kubernetes
from ..cluster.variables import ClusterSettings, read_cluster
from ..errors import ConfigError
from ..kube.environment import container_env
from ..kube.report import Report
from ..kube.workloads import Container, containers, dig, gpu_grant
from ..settings import parse_variable, resolve, split_count, split_shown

JOB_DEFAULT_BACKOFF = 6  # the Job API's default backoffLimit
# An Indexed Job may have at most 100000 completions; no count here is expanded past it.
MAX_PODS = 100_000
JOBSET_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"
TFJOB_CONTAINER = "tensorflow"


@dataclass(frozen=True)
class Group:
    """The Pods of one template: their host names in index order and their DNS subdomain."""

    obj: str  # kind/name
    name: str  # the replicatedJob, or "" for a Job
    job: Mapping[str, Any]  # the Job spec the Pods come from
    pod: dict[str, Any]
    hosts: list[str]  # the Pods' host names, in task-index order
    subdomain: str
    labels: dict[str, str]  # labels every Pod gets, the controllers' included
    needs_index: bool  # the completion index is not the task index: DIST_TASK_INDEX is needed
    fields: dict[str, str] = field(default_factory=dict)  # Downward API values known here
    template: str = ""  # the DIST_HOSTS template naming these Pods, when one can


def _int(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _count(value: Any, what: str) -> int:
    """A Pod count (default 1); above Kubernetes' limit it is refused, not expanded."""
    count = _int(value, 1)
    if count > MAX_PODS:
        raise ValueError(f"{what} {count} is more than Kubernetes allows ({MAX_PODS})")
    return count


def _job_group(doc: Mapping[str, Any]) -> Group:
    name, spec = str(dig(doc, ("metadata", "name"))), doc.get("spec") or {}
    pod = dig(spec, ("template", "spec"))
    labels = dict(dig(spec, ("template", "metadata", "labels")) or {})
    labels.update({"job-name": name, "batch.kubernetes.io/job-name": name})
    count = _count(spec.get("completions"), "completions")
    return Group(
        f"Job/{name}",
        "",
        spec,
        pod,
        [f"{name}-{i}" for i in range(count)],
        str(pod.get("subdomain") or ""),
        labels,
        spec.get("completionMode") != "Indexed",
        {"metadata.labels['job-name']": name},
        f"{name}-{{i}}.{pod.get('subdomain')}",
    )


def _jobset_groups(doc: Mapping[str, Any]) -> Iterator[Group]:
    """One group per replicatedJob; JobSet names Pods <jobset>-<rjob>-<job>-<pod>."""
    name = str(dig(doc, ("metadata", "name")))
    subdomain = str(dig(doc, ("spec", "network", "subdomain")) or name)
    for rjob in dig(doc, ("spec", "replicatedJobs")) or []:
        spec = dig(rjob, ("template", "spec")) or {}
        pod, rname = dig(spec, ("template", "spec")), str(rjob.get("name"))
        if not isinstance(pod, dict):
            continue
        replicas, pods = _int(rjob.get("replicas"), 1), _int(spec.get("parallelism"), 1)
        _count(max(replicas, 0) * max(pods, 0), "replicas x parallelism")
        hosts = [f"{name}-{rname}-{j}-{p}" for j in range(replicas) for p in range(pods)]
        labels = {JOBSET_LABEL: rname, "jobset.sigs.k8s.io/jobset-name": name}
        fields = {f"metadata.labels['{key}']": value for key, value in labels.items()}
        template = f"{name}-{rname}-0-{{i}}.{subdomain}" if replicas == 1 else ""
        if pods == 1 and replicas > 1:
            template = f"{name}-{rname}-{{i}}-0.{subdomain}"
        yield Group(
            f"JobSet/{name}",
            rname,
            spec,
            pod,
            hosts,
            subdomain,
            labels,
            replicas > 1,
            fields,
            template,
        )


def _env(container: Container, group: Group) -> dict[str, str]:
    """The container's env, with the Downward API values this group fixes (its type)."""
    env = container_env(container, gpu_grant(container.resources("limits")), Report())
    for item in container.spec.get("env") or []:
        path = dig(item, ("valueFrom", "fieldRef", "fieldPath"))
        if path in group.fields:
            env[str(item["name"])] = group.fields[path]
    return env


def _mode(env: Mapping[str, str]) -> str:
    """``DISTRIBUTED`` through the contract's own parser; an invalid value counts as off
    (the tfboot variables' check reports it)."""
    try:
        return str(parse_variable(env, "DISTRIBUTED"))
    except ConfigError:
        return "off"


def _read(env: Mapping[str, str]) -> ClusterSettings:
    given = {name: (value, "env") for name, value in env.items() if value.strip()}
    return read_cluster(given, lambda name, parse, _accepted: parse(name, given[name][0]))


def _settings(container: Container, env: Mapping[str, str], report: Report) -> ClusterSettings:
    """The ``DIST_*`` values; an invalid one is a finding, and the rest are still checked."""
    try:
        return _read(env)
    except ConfigError as exc:
        for problem in exc.problems:
            report.add(container.where, "config-invalid", str(problem), "see tfboot show")
        bad = {problem.variable for problem in exc.problems}
        try:
            return _read({k: v for k, v in env.items() if k not in bad})
        except ConfigError:
            return ClusterSettings()


def _settings_quiet(env: Mapping[str, str]) -> ClusterSettings:
    try:
        return _read(env)
    except ConfigError:
        return ClusterSettings()


def _sets(container: Container, name: str) -> bool:
    """True when the container's env has an entry ``name`` (a value or a ``valueFrom``)."""
    return any((item or {}).get("name") == name for item in container.spec.get("env") or [])


def _literal(container: Container, name: str) -> str | None:
    """The literal ``value`` of env entry ``name``, None when unset or set another way."""
    for item in container.spec.get("env") or []:
        if (item or {}).get("name") == name and "valueFrom" not in item:
            return str(item.get("value", ""))
    return None


def _check_count(
    container: Container, groups: Mapping[str, Group], dist: ClusterSettings, report: Report
) -> None:
    """``DIST_TASKS`` against the Pods of every task type run in this input."""
    tasks = dict(dist.tasks or ())
    shown = dist.given.get("DIST_TASKS", ("(unset)",))[0]
    for kind, group in groups.items():
        completions = _int(group.job.get("completions"), 1)
        parallelism = _int(group.job.get("parallelism"), 1)
        problem = ""
        if kind not in tasks:
            problem = f"DIST_TASKS={shown} has no {kind}"
        elif tasks[kind] != len(group.hosts):
            problem = (
                f"DIST_TASKS has {tasks[kind]} {kind} task(s), and {len(group.hosts)} Pod(s) run"
            )
        elif parallelism != completions:
            problem = f"{kind}: parallelism {parallelism} differs from completions {completions}"
        if problem:
            report.add(
                container.where,
                "dist-tasks-count",
                f"{problem}: a worker waits for peers that never start, or is left out",
                "set completions = parallelism = the task count, from one literal "
                "(the multi-worker overlay's workers.env)",
            )
    complete = len(groups) > 1 or any(g.name for g in groups.values())  # a JobSet: every type
    for kind in tasks:
        if complete and kind not in groups:
            report.add(
                container.where,
                "dist-tasks-count",
                f"DIST_TASKS={shown} counts {kind} tasks, and no replicatedJob runs {kind}: "
                "the others wait for peers that never start",
                f"add a replicatedJob named {kind}, or drop {kind} from DIST_TASKS",
            )


def _check_index(container: Container, group: Group, report: Report) -> None:
    literal = _literal(container, "DIST_TASK_INDEX")
    if literal is not None and len(group.hosts) > 1:
        report.add(
            container.where,
            "dist-task-index",
            f"DIST_TASK_INDEX={literal!r} is a literal, so all {len(group.hosts)} Pods of "
            f"{group.obj} claim the same task: they wait for each other forever",
            "leave DIST_TASK_INDEX unset under an Indexed Job (JOB_COMPLETION_INDEX), or set "
            "it from metadata.annotations['jobset.sigs.k8s.io/job-index']",
        )
    if group.needs_index and not _sets(container, "DIST_TASK_INDEX"):
        why = (
            "the Job is not completionMode: Indexed, so JOB_COMPLETION_INDEX is not set"
            if group.name == ""
            else "the replicatedJob has several Jobs, whose Pods share completion index 0"
        )
        hint = (
            "set completionMode: Indexed"
            if group.name == ""
            else "set DIST_TASK_INDEX from metadata.annotations['jobset.sigs.k8s.io/job-index'] "
            "(parallelism 1), or use replicas: 1 with parallelism N"
        )
        report.add(container.where, "dist-task-index", f"no task index: {why}", hint)


def _check_hosts(
    container: Container, groups: Mapping[str, Group], dist: ClusterSettings, report: Report
) -> None:
    """``DIST_HOSTS`` against the DNS names of every task type's Pods in this input."""
    for kind, group in groups.items():
        problem = _hosts_problem(kind, group, dist)
        if problem is None:
            continue
        hint = (
            f"DIST_HOSTS={kind}={group.template}"
            if group.template
            else (
                "list the Pods' names in DIST_HOSTS: "
                "<jobset>-<replicatedJob>-<job>-<pod>.<subdomain>"
            )
        )
        report.add(
            container.where, "dist-hosts", f"{problem}: peers would not find each other", hint
        )


def _hosts_problem(kind: str, group: Group, dist: ClusterSettings) -> str | None:
    hosts = (dist.hosts or {}).get(kind)
    expected = [f"{host}.{group.subdomain}" for host in group.hosts]
    if hosts is None:
        return f"DIST_HOSTS names no {kind} hosts"
    found = [a.rpartition(":")[0] for a in hosts.addresses(len(expected), 1)]
    wrong = [
        (i, a, e)
        for i, (a, e) in enumerate(zip(found, expected, strict=False))
        if a != e and not a.startswith(e + ".")
    ]
    if len(found) != len(expected):
        return f"DIST_HOSTS lists {len(found)} {kind} host(s) for {len(expected)} Pod(s)"
    if not wrong:
        return None
    i, got, want = wrong[0]
    return f"DIST_HOSTS gives {kind} {i} the name {got}, and the Pod is {want}"


def _check_service(
    container: Container, group: Group, services: Sequence[Mapping[str, Any]], report: Report
):
    """The headless Service whose name is the Pods' subdomain, and that selects them."""
    if not group.subdomain:
        report.add(
            container.where,
            "dist-subdomain",
            "the Pod template has no subdomain: the Pods get no DNS names",
            "set spec.template.spec.subdomain to a headless Service's name",
        )
        return
    named = [s for s in services if dig(s, ("metadata", "name")) == group.subdomain]
    headless = [s for s in named if dig(s, ("spec", "clusterIP")) == "None"]
    if not headless:
        what = "is not headless (clusterIP: None)" if named else "is not in the input"
        report.add(
            container.where,
            "dist-subdomain",
            f"the Pods' subdomain {group.subdomain}: a Service of that name {what}",
            f"render a Service {group.subdomain} with clusterIP: None along with the Job",
        )
        return
    service = headless[0]
    selector = dig(service, ("spec", "selector")) or {}
    if not selector or any(group.labels.get(k) != str(v) for k, v in selector.items()):
        report.add(
            container.where,
            "dist-service-selector",
            f"Service {group.subdomain} selects {selector or 'nothing'}, which the Pods "
            "do not all carry: they get no DNS records",
            f"select job-name: {group.labels.get('job-name', '<job>')}",
        )
    if dig(service, ("spec", "publishNotReadyAddresses")) is not True:
        _not_published(container, f"Service {group.subdomain}", report)


def _not_published(container: Container, what: str, report: Report) -> None:
    report.add(
        container.where,
        "dist-publish-not-ready",
        f"{what} publishes a Pod's DNS name only once it is Ready: early workers "
        "cannot resolve their peers",
        "set publishNotReadyAddresses: true",
    )


def _check_replicas(container: Container, env: Mapping[str, str], dist: ClusterSettings, report):
    if dist.replicas_per_worker is None or (dist.task_type or "worker") not in ("chief", "worker"):
        return
    grant = gpu_grant(container.resources("limits"))
    try:
        given = resolve(env).virtual_split
    except ConfigError:
        return  # reported by the tfboot variables' check
    split = split_count(given)
    local = grant.count * split if grant.count else 1
    if local != dist.replicas_per_worker:
        sizes = f" ({split} logical GPUs)" if isinstance(given, tuple) else ""
        how = (f"{grant.count} GPU(s) x VIRTUAL_SPLIT={split_shown(given)}{sizes}"
               if grant.count else "no GPU: 1 CPU")  # fmt: skip
        report.add(
            container.where,
            "dist-replicas",
            f"DIST_REPLICAS_PER_WORKER={dist.replicas_per_worker}, and this worker has {local} "
            f"replica(s) ({how}): it stops at import",
            f"set DIST_REPLICAS_PER_WORKER={local}, or change the GPUs or the split",
        )


def _check_port(container: Container, dist: ClusterSettings, report: Report) -> None:
    port = dist.port or K8S_PORT
    ports = [p.get("containerPort") for p in container.spec.get("ports") or [] if p]
    if port not in ports:
        report.add(
            container.where,
            "dist-port",
            f"DIST_PORT is {port}, and the container declares ports {ports or 'none'}",
            f"add containerPort: {port} (named, for the Service's targetPort)",
        )


def _engine(group: Group, mode: str, env, dist: ClusterSettings) -> Engine | None:
    """The engine tfboot would pick in these Pods (an Indexed Job sets JOB_COMPLETION_INDEX)."""
    runtime = dict(env)
    if not group.needs_index:
        runtime.setdefault("JOB_COMPLETION_INDEX", "0")
    return BY_NAME.get(detect(mode, dist, runtime))


def _check_worker(
    container: Container, group: Group, groups: Mapping[str, Group], services, report: Report
) -> bool:
    """The rules for one worker container; False when it is not distributed."""
    env = _env(container, group)
    mode = _mode(env)
    if mode == "off":
        return False
    dist = _settings(container, env, report)
    _check_replicas(container, env, dist, report)
    if isinstance(BY_NAME.get(mode), Kubernetes) and env.get("TF_CONFIG", "").strip():
        report.add(
            container.where,
            "dist-tf-config",
            f"DISTRIBUTED={mode} builds TF_CONFIG, and the container sets one too: "
            "the worker stops at import",
            "remove TF_CONFIG, or set DISTRIBUTED=auto to only check the one given",
        )
    if not isinstance(_engine(group, mode, env, dist), Kubernetes):
        return True
    _check_count(container, groups, dist, report)
    _check_index(container, group, report)
    _check_hosts(container, groups, dist, report)
    if group.name == "":
        _check_service(container, group, services, report)
    _check_port(container, report=report, dist=dist)
    backoff = _int(group.job.get("backoffLimit"), JOB_DEFAULT_BACKOFF)
    if backoff > 0:
        report.add(
            container.where,
            "dist-backoff-limit",
            f"backoffLimit {backoff} restarts a failed worker alone, and it cannot "
            "rejoin a running group",
            "set backoffLimit: 0 and restart the whole group (JobSet failurePolicy.maxRestarts)",
        )
    return True


def _check_jobset(file: str, doc, maps, report: Report) -> None:
    network = dig(doc, ("spec", "network")) or {}
    first = None
    groups = {group.name: group for group in _jobset_groups(doc)}
    for group in groups.values():
        for container in containers(file, group.obj, group.pod, maps, group.name):
            if _check_worker(container, group, groups, (), report):
                first = first or container
    if first is None:
        return
    if network.get("enableDNSHostnames") is False:
        report.add(
            first.where,
            "dist-subdomain",
            "network.enableDNSHostnames is false: the Pods get no DNS names",
            "remove it (JobSet defaults it to true)",
        )
    if network.get("publishNotReadyAddresses") is False:
        _not_published(first, "the JobSet's network", report)
    if not _int(dig(doc, ("spec", "failurePolicy", "maxRestarts")), 0):
        report.add(
            first.where,
            "jobset-max-restarts",
            "no failurePolicy.maxRestarts: one failed worker fails the JobSet, "
            "where restarting the whole group would recover",
            "set spec.failurePolicy.maxRestarts (such as 3)",
        )


def _check_tfjob(file: str, doc, maps, report: Report) -> None:
    name = f"TFJob/{dig(doc, ('metadata', 'name'))}"
    for rtype, spec in (dig(doc, ("spec", "tfReplicaSpecs")) or {}).items():
        pod = dig(spec, ("template", "spec"))
        found = list(containers(file, name, pod, maps, str(rtype))) if isinstance(pod, dict) else []
        if not found:
            continue
        if str(rtype).lower() == "master":
            report.add(
                found[0].where,
                "tfjob-master",
                "a Master replica gets task type master, which TensorFlow 2 rejects",
                "rename the replica type to Chief",
            )
        own = [c for c in found if c.spec.get("name") == TFJOB_CONTAINER]
        if not own:
            report.add(
                found[0].where,
                "tfjob-container",
                f"no container is named {TFJOB_CONTAINER}: the operator puts TF_CONFIG only there",
                f"name the training container {TFJOB_CONTAINER}",
            )
            continue
        env = _env(own[0], Group(name, str(rtype), {}, pod, [], "", {}, False))
        if _mode(env) not in ("off", "auto"):
            report.add(
                own[0].where,
                "tfjob-distributed",
                f"DISTRIBUTED={env['DISTRIBUTED']} with the operator's TF_CONFIG stops "
                "the worker at import",
                "set DISTRIBUTED=auto: tfboot checks the operator's TF_CONFIG",
            )
        elif _mode(env) == "auto":
            _check_replicas(own[0], env, _settings(own[0], env, report), report)


def check_cluster(file: str, docs: Sequence[Any], maps, report: Report) -> None:
    """The multi-worker rules for every Job, JobSet and TFJob in one input."""
    services = [d for d in docs if isinstance(d, dict) and d.get("kind") == "Service"]
    for doc in docs:
        kind = doc.get("kind") if isinstance(doc, dict) else None
        try:
            if kind == "Job" and isinstance(dig(doc, ("spec", "template", "spec")), dict):
                group = _job_group(doc)
                for container in containers(file, group.obj, group.pod, maps):
                    kind = _settings_quiet(_env(container, group)).task_type or "worker"
                    _check_worker(container, group, {kind: group}, services, report)
            elif kind == "JobSet":
                _check_jobset(file, doc, maps, report)
            elif kind == "TFJob":
                _check_tfjob(file, doc, maps, report)
        except (AttributeError, TypeError, KeyError, ValueError) as exc:
            report.add(
                (file, f"{kind}/{dig(doc, ('metadata', 'name'))}", "-"),
                "malformed",
                f"the multi-worker rules could not read it: {type(exc).__name__}: {exc}",
                "run kubernetes-validate --strict on it to see which field has the wrong shape",
            )

"""``tfboot selftest`` as text: a header, one line per row, a summary."""

from __future__ import annotations

from .runner import NO_GPU, Report, RowResult


def header(report: Report) -> str:
    gpus = ", ".join(
        f"GPU {i}" + (f" ({g['model']})" if g.get("model") else "")
        for i, g in enumerate(report.gpus)
    )
    nccl = report.nccl
    memlock = nccl.get("memlock_mib")
    lines = [
        f"tfboot selftest: {report.framework} {report.tensorflow}; "
        f"{len(report.gpus)} GPU(s): {gpus}; "
        f"testing GPU {', '.join(map(str, report.tested))} with a {report.cap_mb} MiB cap",
    ]
    if nccl:  # measured for TensorFlow's rows
        lines.append(
            f"NCCL: /dev/shm {nccl.get('shm_mib')} MiB, memlock "
            + (f"{memlock} MiB" if isinstance(memlock, int) else str(memlock))
            + (f" ({nccl['needed']})" if nccl.get("needed") else " (one GPU: NCCL not needed)")
        )
    lines += [f"warning: {w}" for w in nccl.get("warnings", [])]
    if report.mig:
        lines.append(
            f"MIG: {len(report.mig)} instance(s) visible ({', '.join(report.mig)}); a process "
            "uses one, the first" + ("" if len(report.mig) == 1 else ": run one process per slice")
        )
    return "\n".join(lines)


def row_line(result: RowResult) -> str:
    where = "node" if result.gpu is None else f"GPU {result.gpu}"
    return f"{result.status}  {result.row:<17} {where:<6} {result.seconds:5.1f} s  {result.detail}"


def summary(report: Report) -> str:
    if report.error is not None:
        return f"tfboot selftest: error: {report.error}"
    if not report.gpus:
        return (
            f"tfboot selftest: no GPU: {report.framework} {report.tensorflow} lists no GPU on "
            f"this node (exit status {NO_GPU})"
        )
    counts = {s: sum(r.status == s for r in report.rows) for s in ("PASS", "FAIL", "SKIP")}
    seconds = sum(r.seconds for r in report.rows)
    return (
        f"{counts['PASS']} passed, {counts['FAIL']} failed, {counts['SKIP']} skipped "
        f"in {seconds:.0f} s (exit status {report.exit_status})"
    )

"""The usage report as a guest in every job, in real processes (PyTorch's CPU build: the
fastest framework to import): it never hangs a fork or an exit, never turns a signal into
an exception, never changes an exit status, never prints a credential, never loses a
record, and reports the job's own figures, one line per job."""

from __future__ import annotations

import base64
import http.server
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest
from support import free_ports, scenario_env, stamp

APPLIED = {"CPU_THREADS": "2"}  # something tfboot applies on any machine
TORCH = "import torch\nx = torch.ones(64, 64)\n(x @ x).sum()\n"


def usage_env(usage: Path) -> dict[str, str]:
    return scenario_env(APPLIED | {"TFBOOT_USAGE_FILE": str(usage)})


def used_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("tfboot: used:")]


def program(code: str) -> str:
    """``code`` as a program: TORCH first, then the rest unindented."""
    if code.startswith(TORCH):
        return TORCH + textwrap.dedent(code[len(TORCH) :])
    return textwrap.dedent(code)


def start(code: str, env: dict[str, str], **kwargs: object) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", program(code)],
                            env=scenario_env(APPLIED | env), text=True,
                            **kwargs)  # type: ignore[call-overload]  # fmt: skip


def run(code: str, env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", program(code)],
                          env=scenario_env(APPLIED | env), capture_output=True, text=True,
                          timeout=timeout)  # fmt: skip


class Stalling(http.server.BaseHTTPRequestHandler):
    """A Pushgateway (or a proxy before one) that answers one byte every second, for ever."""

    def do_PUT(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        with __import__("contextlib").suppress(OSError):
            for _ in range(600):
                self.wfile.write(b"H")
                self.wfile.flush()
                time.sleep(1)

    def log_message(self, *args: object) -> None:
        pass


class Recording(http.server.BaseHTTPRequestHandler):
    """A Pushgateway that answers 200 and keeps each request's Authorization header."""

    seen: ClassVar[list[str | None]] = []

    def do_PUT(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        Recording.seen.append(self.headers.get("Authorization"))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def serve(handler: type[http.server.BaseHTTPRequestHandler]) -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def stalling() -> Iterator[str]:
    yield from serve(Stalling)


@pytest.fixture
def recording() -> Iterator[str]:
    Recording.seen = []
    yield from serve(Recording)


# -- never at the job's expense ---------------------------------------------------------------


def test_a_fork_pool_terminates_while_a_snapshot_push_stalls(stalling: str) -> None:
    code = (
        TORCH
        + """
        import multiprocessing, time
        time.sleep(2.5)  # a snapshot's push to the stalling gateway is under way now
        pool = multiprocessing.get_context("fork").Pool(2)
        print(pool.map(abs, [-1, -2]), flush=True)
        pool.terminate()
        pool.join()
        print("terminated", flush=True)
    """
    )
    done = run(code, {"TFBOOT_PUSHGATEWAY": stalling, "TFBOOT_USAGE_INTERVAL": "1"}, timeout=60)
    assert "terminated" in done.stdout and done.returncode == 0, done.stderr


def test_no_lock_of_tfboot_is_inherited_taken_by_a_fork() -> None:
    code = (
        TORCH
        + """
        import os, threading
        import tfboot.executor as executor, tfboot.usage as usage
        held, release = threading.Event(), threading.Event()
        def hold():
            with usage._lock, executor._lock:
                held.set()
                release.wait()
        threading.Thread(target=hold, daemon=True).start()
        held.wait()
        child = os.fork()
        if child == 0:
            free = usage._lock.acquire(timeout=5) and executor._lock.acquire(timeout=5)
            os._exit(0 if free else 1)
        release.set()
        print("child", os.waitpid(child, 0)[1], flush=True)
    """
    )
    done = run(code, {}, timeout=60)
    assert done.returncode == 0 and "child 0" in done.stdout, done.stderr


def test_a_forked_child_has_the_sigterm_disposition_it_would_have_without_tfboot() -> None:
    """A fork child gets SIGTERM's default back, and a SIGTERM sent the moment it starts
    ends it, as without tfboot (a Python handler inherited across the fork would lose it)."""
    code = (
        TORCH
        + """
        import multiprocessing as mp, os, signal, sys, time
        def child():
            sys.exit(0 if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL else 3)
        p = mp.get_context("fork").Process(target=child); p.start(); p.join()
        codes = [p.exitcode]
        for _ in range(10):
            p = mp.get_context("fork").Process(target=time.sleep, args=(30,))
            p.start()
            os.kill(p.pid, signal.SIGTERM)
            p.join()
            codes.append(p.exitcode)
        print(codes, flush=True)
    """
    )
    done = run(code, {}, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[0] == str([0] + [-15] * 10)


def test_the_exit_ends_within_the_deadline_whatever_the_gateway_does(stalling: str) -> None:
    """The gateway answers for 600 s; the job ends before its answer does (the run is given
    60 s), by tfboot's own deadline for the push, which it names."""
    done = run(TORCH, {"TFBOOT_PUSHGATEWAY": stalling}, timeout=60)
    assert done.returncode == 0 and len(used_lines(done.stderr)) == 1
    assert "did not finish within 5 s" in done.stderr or "no answer within" in done.stderr


def test_sigterm_with_a_broken_stderr_still_ends_by_the_signal(tmp_path: Path) -> None:
    usage = tmp_path / "usage.json"
    read, write = os.pipe()
    process = start(TORCH + "import time\nprint('ready', flush=True)\ntime.sleep(60)\n",
                    {"TFBOOT_USAGE_FILE": str(usage)}, stdout=subprocess.PIPE,
                    stderr=write)  # fmt: skip
    os.close(write)
    assert process.stdout is not None and process.stdout.readline().strip() == "ready"
    os.close(read)  # stderr is now a broken pipe
    process.send_signal(signal.SIGTERM)
    assert process.wait(30) == -signal.SIGTERM
    record = json.loads(usage.read_text())
    assert record["final"] and record["reason"] == "SIGTERM"


def test_a_broken_stderr_at_exit_still_writes_the_final_record(tmp_path: Path) -> None:
    usage = tmp_path / "usage.json"
    read, write = os.pipe()
    os.close(read)
    done = subprocess.run([sys.executable, "-c", TORCH], stderr=write, capture_output=False,
                          stdout=subprocess.DEVNULL, timeout=60,
                          env=usage_env(usage))  # fmt: skip
    os.close(write)
    assert done.returncode == 0
    assert json.loads(usage.read_text())["final"]


def test_a_closed_stderr_never_moves_tfboot_s_lines_to_stdout(tmp_path: Path) -> None:
    usage = tmp_path / "usage.json"
    command = f"exec {sys.executable} -c {shlex.quote(TORCH)} 2>&-"
    done = subprocess.run(command, shell=True, text=True, capture_output=True, timeout=60,
                          env=usage_env(usage))  # fmt: skip
    assert done.returncode == 0 and "tfboot" not in done.stdout
    assert json.loads(usage.read_text())["final"]


END_CASES = {
    "normal": ("pass", None),
    "sys.exit(3)": ("import sys; sys.exit(3)", None),
    "exception": ("raise ValueError('boom')", None),
    "SIGTERM default": ("import os, signal; os.kill(os.getpid(), signal.SIGTERM)\n"
                        "import time; time.sleep(5)", None),
    "SIGTERM ignored before": ("import os, signal, time\nos.kill(os.getpid(), signal.SIGTERM)\n"
                               "time.sleep(0.5); print('survived')",
                               "import signal; signal.signal(signal.SIGTERM, signal.SIG_IGN)"),
    "handler before": ("import os, signal, time\nos.kill(os.getpid(), signal.SIGTERM)\n"
                       "time.sleep(5)",
                       "import signal, sys\nsignal.signal(signal.SIGTERM, "
                       "lambda *a: sys.exit(7))"),
    "handler after": ("import os, signal, sys, time\n"
                      "signal.signal(signal.SIGTERM, lambda *a: sys.exit(9))\n"
                      "os.kill(os.getpid(), signal.SIGTERM)\ntime.sleep(5)", None),
}  # fmt: skip


@pytest.mark.parametrize("case", list(END_CASES))
def test_the_exit_status_is_the_one_without_tfboot(case: str) -> None:
    tail, before = END_CASES[case]
    code = (before + "\n" if before else "") + TORCH + tail + "\n"
    without = run(code, {"TFBOOT_DISABLE": "1"}, timeout=60)
    with_tfboot = run(code, {}, timeout=60)
    assert with_tfboot.returncode == without.returncode, with_tfboot.stderr
    assert with_tfboot.stdout == without.stdout
    assert len(used_lines(with_tfboot.stderr)) == 1, with_tfboot.stderr


def test_as_pid_1_an_ignored_sigterm_is_not_the_end(tmp_path: Path) -> None:
    if shutil.which("unshare") is None or os.geteuid() != 0:
        pytest.skip("needs root and unshare (util-linux) for a PID namespace")
    usage = tmp_path / "usage.json"
    code = TORCH + textwrap.dedent("""
        import os, signal, time
        assert os.getpid() == 1
        os.kill(1, signal.SIGTERM)  # PID 1 without a handler: the kernel drops it
        time.sleep(1.5)
        print("went on at", time.time(), flush=True)
    """)
    done = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c",
                           code], capture_output=True, text=True, timeout=60,
                          env=scenario_env(APPLIED | {"TFBOOT_USAGE_FILE": str(usage),
                                                      "TFBOOT_USAGE_INTERVAL": "1"}))  # fmt: skip
    assert done.returncode == 0 and "went on" in done.stdout, done.stderr
    record = json.loads(usage.read_text())
    assert record["final"] and record["reason"] == "exit"
    # the final record written at the exit, after the program went on, not at the SIGTERM
    went_on = float(done.stdout.split("went on at ")[1].split()[0])
    assert stamp(record["at"]) >= int(went_on), (record["at"], went_on)


# -- no secret in any output ---------------------------------------------------------------


SECRET_URL = "https://user:hunter2@pushgateway:90910/"  # a port typo: invalid


def test_a_bad_gateway_url_is_refused_without_its_password() -> None:
    done = run(TORCH, {"TFBOOT_PUSHGATEWAY": SECRET_URL}, timeout=60)
    assert done.returncode != 0 and "TFBOOT_PUSHGATEWAY" in done.stderr
    assert "hunter2" not in done.stderr + done.stdout and "***@pushgateway" in done.stderr
    for command in (["show"], ["show", "--json"], ["check"], ["check", "--json"]):
        shown = subprocess.run([sys.executable, "-m", "tfboot", *command], capture_output=True,
                               text=True, timeout=60,
                               env=scenario_env({"TFBOOT_PUSHGATEWAY": SECRET_URL}))  # fmt: skip
        assert "hunter2" not in shown.stdout + shown.stderr, command


def test_show_hides_a_valid_gateway_s_password() -> None:
    env = scenario_env({"TFBOOT_PUSHGATEWAY": "https://user:hunter2@pushgateway:9091/"})
    for command in (["show"], ["show", "--json"]):
        shown = subprocess.run([sys.executable, "-m", "tfboot", *command], capture_output=True,
                               text=True, timeout=60, env=env)  # fmt: skip
        assert shown.returncode == 0 and "hunter2" not in shown.stdout + shown.stderr
        assert "https://***@pushgateway:9091/" in shown.stdout


def test_credentials_in_the_url_are_sent_as_basic_auth(recording: str, tmp_path: Path) -> None:
    url = recording.replace("http://", "http://job%40team:s3cr%2Ft@")
    done = run(TORCH, {"TFBOOT_PUSHGATEWAY": url, "TFBOOT_USAGE_FILE": str(tmp_path / "u.json")})
    assert done.returncode == 0 and "warning" not in done.stderr, done.stderr
    assert Recording.seen, "nothing was pushed"
    expected = "Basic " + base64.b64encode(b"job@team:s3cr/t").decode()
    assert set(Recording.seen) == {expected}
    assert "s3cr" not in (tmp_path / "u.json").read_text()


def test_a_refused_push_warns_without_the_password() -> None:
    (port,) = free_ports(1)  # held, never listening: refused, whoever else runs here
    done = run(TORCH, {"TFBOOT_PUSHGATEWAY": f"http://u:hunter2@127.0.0.1:{port}"})
    assert done.returncode == 0 and "hunter2" not in done.stderr
    assert "Connection refused" in done.stderr, done.stderr


# -- records are never lost ------------------------------------------------------------------


def test_a_sink_that_failed_once_is_written_again_later(tmp_path: Path) -> None:
    folder = tmp_path / "later"
    usage = folder / "usage.json"
    code = (
        TORCH
        + f"""
        import os, time
        time.sleep(1.6)  # one snapshot fails: the folder is not there yet
        os.mkdir({str(folder)!r})
        time.sleep(1.6)
    """
    )
    done = run(code, {"TFBOOT_USAGE_FILE": str(usage), "TFBOOT_USAGE_INTERVAL": "1"})
    assert done.returncode == 0
    assert json.loads(usage.read_text())["final"]
    assert "tried again" in done.stderr


def test_the_program_s_termination_message_is_kept_byte_for_byte(tmp_path: Path) -> None:
    log = tmp_path / "termination-log"
    log.write_bytes(b"")
    theirs = b"checkpoint \xff\xfe failed\n"
    code = TORCH + f"open({str(log)!r}, 'wb').write({theirs!r})\n"
    done = run(code, {"TFBOOT_TERMINATION_LOG": str(log)})
    assert done.returncode == 0
    written = log.read_bytes()
    assert written.startswith(theirs) and b"tfboot used:" in written


# -- the figures are the job's own ----------------------------------------------------------


def test_the_process_tree_s_memory_is_summed_at_one_moment(tmp_path: Path) -> None:
    """Outside a container of its own (this test's cgroup is shared), the figure covers the
    process and its children together."""
    usage = tmp_path / "usage.json"
    code = (
        TORCH
        + """
        import subprocess, sys, time
        hold = "b = bytearray(300 << 20)\\nimport time\\ntime.sleep(3)"
        child = subprocess.Popen([sys.executable, "-c", hold])
        mine = bytearray(300 << 20)
        time.sleep(2.5)
        child.wait()
    """
    )
    done = run(code, {"TFBOOT_USAGE_FILE": str(usage), "TFBOOT_USAGE_INTERVAL": "1"})
    assert done.returncode == 0, done.stderr
    memory = json.loads(usage.read_text())["host_memory"]
    if memory["scope"]["covers"] == "cgroup":
        pytest.skip(f"this test runs in a cgroup of its own: {memory['scope']['why']}")
    assert memory["peak_mib"] >= 600, memory
    assert "process tree" in memory["source"]


def test_the_window_is_the_process_s_life_from_its_start(tmp_path: Path) -> None:
    """The second of CPU the program burns before it imports torch counts, over the wall
    time from the process's start: the import and what came before are part of the job."""
    usage = tmp_path / "usage.json"
    burn = ("import time\nprint(time.time(), flush=True)\nend = time.process_time() + 1.0\n"
            "while time.process_time() < end:\n    pass\n")  # fmt: skip
    done = run(burn + TORCH, {"TFBOOT_USAGE_FILE": str(usage)})
    assert done.returncode == 0, done.stderr
    record = json.loads(usage.read_text())
    cpu = record["cpu"]
    # the window starts no later than the program's first line, before the burn
    first = float(done.stdout.split()[0])
    assert stamp(record["started"]) <= int(first), (record["started"], first)
    assert cpu["cpu_seconds"] >= 1.0  # the burn's CPU time, not the clock's
    assert cpu["used_cpus"] == pytest.approx(cpu["cpu_seconds"] / cpu["wall_seconds"], abs=0.002)
    assert "starttime" in cpu["wall_source"] and record["started"] <= record["at"]


def test_a_short_run_gets_no_cpu_suggestion(tmp_path: Path) -> None:
    usage = tmp_path / "usage.json"
    done = run(TORCH, {"TFBOOT_USAGE_FILE": str(usage)})
    record = json.loads(usage.read_text())
    assert "cpu" not in record["suggest"]["resources"].get("requests", {})
    assert "--cpus-per-task" not in record["suggest"]["slurm"]
    assert any("gives no CPU figure" in n for n in record["suggest"]["notes"])
    [line] = used_lines(done.stderr)  # no CPU figure printed, and why said once
    assert "not judged in a run under 60 s" in line and "gives no" not in line
    assert "CPU (" in line and ", 2 threads) not judged" in line
    assert " CPUs" not in line and line.count(" s since the process started") == 1


def test_a_limit_changed_while_running_is_recorded(tmp_path: Path) -> None:
    """A resize, on a fake cgroup v2 tree (the kernel's files cannot be written here): the
    final record judges against the limit at the end and names the one before."""
    root = tmp_path / "root"
    cgroup = root / "sys/fs/cgroup"
    cgroup.mkdir(parents=True)
    (root / "proc/self").mkdir(parents=True)
    (root / "proc/self/cgroup").write_text("0::/\n")
    (root / "proc/self/mountinfo").write_text(
        "30 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw\n"
    )
    for name, text in (
        ("memory.max", str(1 << 30)),
        ("memory.peak", str(300 << 20)),
        ("memory.current", str(200 << 20)),
        ("cpu.max", "200000 100000"),
        ("cpu.stat", "usage_usec 1000\nnr_periods 1\nnr_throttled 0\n"),
    ):
        (cgroup / name).write_text(text + "\n")
    usage = tmp_path / "usage.json"
    code = (
        TORCH
        + f"""
        import time
        time.sleep(1.5)
        open({str(cgroup / "memory.max")!r}, "w").write("{2 << 30}\\n")
        open({str(cgroup / "cpu.max")!r}, "w").write("400000 100000\\n")
        time.sleep(1.6)
    """
    )
    done = run(code, {"TFBOOT_USAGE_FILE": str(usage), "TFBOOT_USAGE_INTERVAL": "1",
                      "TFBOOT_CGROUP_ROOT": str(root)})  # fmt: skip
    assert done.returncode == 0, done.stderr
    record = json.loads(usage.read_text())
    memory, cpu = record["host_memory"], record["cpu"]
    assert memory["limit_mib"] == 2048 and [e["limit_mib"] for e in memory["earlier_limits"]] == [
        1024
    ]
    assert cpu["quota"] == 4 and [e["quota"] for e in cpu["earlier_quotas"]] == [2]
    assert memory["scope"]["covers"] == "cgroup"
    # What the job used under each: memory.current sampled (memory.peak did not rise).
    assert memory["earlier_limits"][0]["peak_mib"] == memory["since_resize"]["peak_mib"] == 200
    assert cpu["earlier_quotas"][0]["throttled_fraction"] == 0.0
    assert cpu["since_resize"]["throttled_fraction"] == 0.0


def test_a_budget_the_pod_shares_is_named_in_the_record(tmp_path: Path) -> None:
    """A container's own files say max under the Pod's cgroup's 1 GiB and 2.5 CPUs (two
    fake trees from tests/testdata/cgroup): the record says whose each budget is."""
    trees = Path(__file__).parents[1] / "testdata" / "cgroup"
    for limit, tree in (("limit_shared", "v2-memory-parent"), ("quota_shared", "v2-nested")):
        usage = tmp_path / f"{tree}.json"
        done = run(TORCH, {"TFBOOT_USAGE_FILE": str(usage),
                           "TFBOOT_CGROUP_ROOT": str(trees / tree)})  # fmt: skip
        assert done.returncode == 0, done.stderr
        record = json.loads(usage.read_text())
        section = record["host_memory" if limit == "limit_shared" else "cpu"]
        assert section[limit] == "a parent cgroup's, shared with every process under it"
        assert f"(shared: {limit})" in used_lines(done.stderr)[0]


# -- one job, one report ---------------------------------------------------------------------


def test_spawned_dataloader_workers_give_one_line(tmp_path: Path) -> None:
    usage = tmp_path / "usage.json"
    script = tmp_path / "train.py"
    script.write_text(
        textwrap.dedent("""
        import torch
        from torch.utils.data import DataLoader
        if __name__ == "__main__":
            data = list(range(8))
            for epoch in range(2):
                for batch in DataLoader(data, batch_size=2, num_workers=2,
                                        multiprocessing_context="spawn"):
                    pass
            print("trained", flush=True)
    """)
    )
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=180, cwd=tmp_path,
                          env=usage_env(usage))  # fmt: skip
    assert done.returncode == 0 and "trained" in done.stdout, done.stderr
    [line] = used_lines(done.stderr)
    assert line.startswith("tfboot: used: job of 5 processes;")
    record = json.loads(usage.read_text())
    assert len(record["members"]) == 4 and all(m["final"] for m in record["members"])
    assert [p.name for p in tmp_path.glob("usage*.json")] == ["usage.json"]  # no file a worker


def test_torchrun_s_ranks_report_into_the_launcher_s_record(tmp_path: Path) -> None:
    usage = tmp_path / "usage.json"
    script = tmp_path / "rank.py"
    script.write_text("import os, torch\nprint('rank', os.environ['RANK'], flush=True)\n")
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2",
                           str(script)], capture_output=True, text=True, timeout=180,
                          cwd=tmp_path,
                          env=usage_env(usage))  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert sorted(done.stdout.split()) == ["0", "1", "rank", "rank"]
    [line] = used_lines(done.stderr)
    assert "job of 3 processes" in line
    record = json.loads(usage.read_text())
    ranks = {m["pid"] for m in record["members"]}
    assert len(ranks) == 2
    # The ranks' records live in the launcher's: no file of their own to collect by hand.
    assert [p.name for p in tmp_path.glob("usage*.json")] == ["usage.json"]
    merged = subprocess.run([sys.executable, "-m", "tfboot", "suggest", "--json", str(usage)],
                            capture_output=True, text=True, timeout=60)  # fmt: skip
    assert merged.returncode == 0, merged.stderr
    assert "1 run" in json.loads(merged.stdout)["suggest"]["sources"]["memory"]


# -- every way of installing works or says it does not ----------------------------------------


def test_a_target_tree_on_pythonpath_is_said_to_be_inactive(tmp_path: Path) -> None:
    wheel = next(Path(__file__).parents[2].glob("dist/tfboot-*.whl"), None)
    assert wheel is not None, "scripts/install-wheel.sh builds dist/tfboot-*.whl"
    target = tmp_path / "target"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target",
                    str(target), str(wheel)], check=True, timeout=120)  # fmt: skip
    python = shutil.which("python3") or sys.executable
    env = {"PYTHONPATH": str(target), "CPU_THREADS": "2", "PYTHONNOUSERSITE": "1"}
    for command in (["show"], ["check"]):
        shown = subprocess.run([python, "-s", "-m", "tfboot", *command],
                               capture_output=True, text=True, timeout=60,
                               env=scenario_env(env))  # fmt: skip
        first = shown.stdout.splitlines()[0]
        assert first.startswith("tfboot: warning: tfboot's start-up hook did not run"), shown
        assert "not a site directory" in first and "--target" in first
    shown = subprocess.run([python, "-m", "tfboot", "show", "--json"], capture_output=True,
                           text=True, timeout=60, env=scenario_env(env))  # fmt: skip
    assert json.loads(shown.stdout)["startup"]["ran"] is False


def test_doctor_under_python_s_reports_what_a_plain_import_got() -> None:
    site_packages = next(p for p in sys.path if p.endswith("site-packages"))
    done = subprocess.run([sys.executable, "-S", "-m", "tfboot", "doctor", "--json"],
                          capture_output=True, text=True, timeout=300,
                          env=scenario_env({"PYTHONPATH": site_packages,
                                            "CPU_THREADS": "1"}))  # fmt: skip
    report = json.loads(done.stdout.splitlines()[-1])
    assert report["startup"] == {"ran": False, "why": report["startup"]["why"]}
    assert "-S" in report["startup"]["why"]
    assert report["decisions"] == [] and report["threads"]["intra_op"] != 1


@pytest.mark.slow
def test_an_editable_install_is_active(tmp_path: Path) -> None:
    repo = Path(__file__).parents[2]
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    subprocess.run([str(venv / "bin/python"), "-m", "pip", "install", "-q",
                    "--disable-pip-version-check", "-e", str(repo)], check=True,
                   timeout=600)  # fmt: skip
    shown = subprocess.run([str(venv / "bin/python"), "-m", "tfboot", "show", "--json"],
                           capture_output=True, text=True, timeout=60,
                           env=scenario_env({"CPU_THREADS": "2"}), cwd=tmp_path)  # fmt: skip
    data = json.loads(shown.stdout)
    assert data["startup"]["ran"] and data["settings"]["CPU_THREADS"]["value"] == "2"
    found = subprocess.run([str(venv / "bin/python"), "-c",
                            "import sys, tfboot; print(tfboot.__file__, tfboot in sys.meta_path)"],
                           capture_output=True, text=True, timeout=60, cwd=tmp_path)  # fmt: skip
    assert found.stdout.split() == [str(repo / "bootstrap/tfboot/__init__.py"), "True"]


# The main thread blocks SIGTERM, so the kernel hands the signal to another thread (as it
# does when the main thread is inside a fork, or already has a signal pending), then waits in
# C: Python's handler cannot run until the wait ends. Seen as a Pool worker that never ended.
STRANDED = TORCH + textwrap.dedent(
    """
    import signal, threading, time
    {setup}
    signal.pthread_sigmask(signal.SIG_BLOCK, {{signal.SIGTERM}})
    print("ready", flush=True)
    time.sleep(60)
    print("slept", flush=True)
    """
)


def test_a_sigterm_the_main_thread_cannot_take_still_ends_the_process(tmp_path: Path) -> None:
    usage = tmp_path / "usage.json"
    process = start(STRANDED.format(setup=""), {"TFBOOT_USAGE_FILE": str(usage)},
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    assert process.stdout is not None and process.stdout.readline().strip() == "ready"
    process.send_signal(signal.SIGTERM)
    out, err = process.communicate(timeout=30)  # without tfboot it ends at once; not in 60 s
    assert process.returncode == -signal.SIGTERM, err
    assert "slept" not in out
    record = json.loads(usage.read_text())
    assert record["final"] and record["reason"] == "SIGTERM"


@pytest.mark.parametrize("setup", [
    "signal.signal(signal.SIGTERM, lambda s, f: print('own handler', flush=True))",
    "import asyncio; loop = asyncio.new_event_loop(); loop.add_signal_handler(signal.SIGTERM, "
    "print, 'asyncio')",
])  # fmt: skip
def test_a_program_s_own_sigterm_handling_is_left_to_it(setup: str) -> None:
    """A handler installed after the import, or an event loop's wakeup fd: tfboot does not end
    the process for them; the signal is handled when the program gets to it."""
    process = start(STRANDED.format(setup=setup).replace("time.sleep(60)", "time.sleep(4)"),
                    {}, stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    assert process.stdout is not None and process.stdout.readline().strip() == "ready"
    process.send_signal(signal.SIGTERM)
    out, err = process.communicate(timeout=60)
    assert "slept" in out, err
    if "own handler" in setup:
        assert process.returncode == 0 and "own handler" in out, err


OWN_FAULTHANDLER = (
    """
import faulthandler, os, signal, sys, time
faulthandler.register(signal.SIGTERM, file=sys.stdout)  # the program's, before the import
"""
    + TORCH
    + """
os.kill(os.getpid(), signal.SIGTERM)
time.sleep(1)
print("went on", flush=True)
"""
)


def test_a_program_s_own_faulthandler_for_sigterm_is_left_to_it() -> None:
    """``faulthandler.register(SIGTERM)`` before the framework's import: SIGTERM dumps the
    traceback and the program goes on, as without tfboot (tfboot's handler would have ended
    it, and its watch replaced the registration)."""
    done = run(OWN_FAULTHANDLER, {})
    assert done.returncode == 0, done.stderr[-2000:]
    assert "most recent call first" in done.stdout and "went on" in done.stdout


def test_a_wait_before_an_exec_is_not_the_job_s(tmp_path: Path) -> None:
    """A container command that waits in a shell (for a database, say), then execs Python:
    the process keeps its start time and CPU across the exec, but the record's window
    begins at the interpreter's start, and says so."""
    usage = tmp_path / "usage.json"
    code = program(TORCH).replace('"', '\\"')
    shell = f'date +%s.%N; sleep 3; date +%s.%N; exec "{sys.executable}" -c "{code}"'
    done = subprocess.run(["sh", "-c", shell],
                          env=scenario_env(APPLIED | {"TFBOOT_USAGE_FILE": str(usage)}),
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    waited, execed = (float(line) for line in done.stdout.split()[:2])  # the wait's ends
    record = json.loads(usage.read_text())
    cpu = record["cpu"]
    # the window starts at the exec, after the wait, however long the rest took: its start
    # (in whole seconds, cut down) no earlier than the exec's second, and the wall time no
    # longer than from the exec to the record (a window from the wait's start would be 3 s
    # longer than that)
    started, at = stamp(record["started"]), stamp(record["at"])
    assert started >= int(execed) and started > waited, (record["started"], waited, execed)
    assert cpu["wall_seconds"] < at + 2 - execed, (cpu, record["at"], execed)
    assert cpu["wall_source"].startswith("the interpreter's start (CLOCK_BOOTTIME), ")
    assert "after the process's: an exec" in cpu["wall_source"]

"""The usage report's metrics through a real Pushgateway, node-exporter and Prometheus
(Debian's packages, installed by scripts/test.sh), all on loopback: a TensorFlow job pushes
its record and writes its textfile, Prometheus scrapes both, and its HTTP API is asked."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import free_ports, run_python, unavailable

pytestmark = [pytest.mark.tf, pytest.mark.slow]

TOOLS = ("prometheus", "prometheus-pushgateway", "prometheus-node-exporter")
WORK = """
import tensorflow as tf
x = tf.ones((256, 256))
print(float(tf.reduce_sum(tf.matmul(x, x))))
"""


def local_url() -> str:
    """A loopback URL with a free port for a server the test starts."""
    return f"http://127.0.0.1:{free_ports(1)[0]}"


def get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as response:
        return response.read().decode()


def wait_until_up(url: str, process: subprocess.Popen[bytes], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            get(url)
            return
        except OSError:
            assert process.poll() is None, f"{process.args[0]} exited {process.returncode}"
            assert time.monotonic() < deadline, f"{url} did not answer"
            time.sleep(0.3)


class Servers:
    """Pushgateway, node-exporter (textfile collector only) and a Prometheus scraping both."""

    def __init__(self, tmp: Path) -> None:
        self.textfiles = tmp / "textfiles"
        self.textfiles.mkdir()
        self.push = local_url()
        self.exporter = local_url()
        self.prometheus = local_url()
        config = tmp / "prometheus.yml"
        config.write_text(json.dumps({
            "global": {"scrape_interval": "1s"},
            "scrape_configs": [
                {"job_name": "pushgateway", "honor_labels": True,
                 "static_configs": [{"targets": [self.push[7:]]}]},
                {"job_name": "node", "static_configs": [{"targets": [self.exporter[7:]]}]},
            ],
        }))  # fmt: skip
        self.processes = [
            subprocess.Popen(["prometheus-pushgateway", f"--web.listen-address={self.push[7:]}",
                              "--persistence.file="], stderr=subprocess.DEVNULL),
            subprocess.Popen(["prometheus-node-exporter", "--collector.disable-defaults",
                              "--collector.textfile",
                              f"--collector.textfile.directory={self.textfiles}",
                              f"--web.listen-address={self.exporter[7:]}"],
                             stderr=subprocess.DEVNULL),
            subprocess.Popen(["prometheus", f"--config.file={config}",
                              f"--storage.tsdb.path={tmp / 'tsdb'}",
                              f"--web.listen-address={self.prometheus[7:]}"],
                             stderr=subprocess.DEVNULL),
        ]  # fmt: skip
        for url, process in zip(
            (f"{self.push}/metrics", f"{self.exporter}/metrics", f"{self.prometheus}/-/ready"),
            self.processes,
            strict=True,
        ):
            wait_until_up(url, process)

    def query(self, expression: str) -> list[dict]:
        url = f"{self.prometheus}/api/v1/query?query={urllib.parse.quote(expression)}"
        return json.loads(get(url))["data"]["result"]

    def stop(self) -> None:
        for process in self.processes:
            process.terminate()
        for process in self.processes:
            process.wait(timeout=30)


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[Servers]:
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        unavailable(f"{', '.join(missing)} not installed (apt-get install {' '.join(missing)})")
    found = Servers(tmp_path)
    try:
        yield found
    finally:
        found.stop()


def test_pushgateway_and_textfile_reach_prometheus(servers: Servers) -> None:
    env = {
        "CPU_THREADS": "2",
        "TFBOOT_PUSHGATEWAY": servers.push,
        "TFBOOT_TEXTFILE_DIR": str(servers.textfiles),
        "TFBOOT_METRICS_JOB": "train",
        "POD_NAME": "train-0",
        "POD_NAMESPACE": "ml",
    }
    run = run_python(WORK, env)
    assert run.returncode == 0, run.stderr
    assert "warning" not in run.stderr, run.stderr
    [textfile] = servers.textfiles.iterdir()
    assert textfile.name == "tfboot-train-ml-train-0.prom"  # the namespace keeps Pods apart
    text = textfile.read_text()
    assert 'tfboot_host_memory_peak_bytes{job="train",namespace="ml",pod="train-0"}' in text
    assert "tfboot_cpu_usage_seconds_total" in text and "tfboot_report_final" in text
    pushed = get(f"{servers.push}/metrics")
    assert 'tfboot_host_memory_peak_bytes{instance="train-0",job="train",namespace="ml"' in pushed
    deadline = time.monotonic() + 60
    while True:
        found = servers.query('tfboot_host_memory_peak_bytes{namespace="ml"}')
        scraped = {series["metric"].get("instance") for series in found}
        if len(found) == 2 or time.monotonic() > deadline:
            break
        time.sleep(1)
    # One series pushed (instance: the Pod), one from the node's textfile (instance: the
    # exporter; Prometheus keeps the file's job label as exported_job).
    assert len(found) == 2 and "train-0" in scraped, found
    assert {s["metric"].get("exported_job") for s in found} == {None, "train"}
    peaks = {float(series["value"][1]) for series in found}
    assert len(peaks) == 1 and peaks.pop() > 100 * (1 << 20)
    duration = servers.query('tfboot_run_duration_seconds{job="train"}')
    assert duration and all(float(s["value"][1]) > 0 for s in duration)
    suggested = servers.query('tfboot_suggested_limits{job="train",resource="memory"}')
    assert suggested and suggested[0]["metric"]["unit"] == "byte"


def test_an_unreachable_pushgateway_warns_once_and_the_job_goes_on() -> None:
    env = {"CPU_THREADS": "2", "TFBOOT_PUSHGATEWAY": local_url()}
    run = run_python(WORK, env)
    assert run.returncode == 0
    warnings = [line for line in run.stderr.splitlines() if "TFBOOT_PUSHGATEWAY" in line]
    assert len(warnings) == 1 and "could not be written" in warnings[0], run.stderr

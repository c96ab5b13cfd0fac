"""Property tests: the hostlist parser and the cluster builder raise only ConfigError."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st
from support import cluster_plan
from tfboot.adapters import Plan
from tfboot.cluster import NAMES
from tfboot.cluster.hostlist import expand_counts, expand_hosts
from tfboot.errors import ConfigError

prefixes = st.sampled_from(["node", "gpu", "a", "rack1-n", "x"])
ranges = st.tuples(st.integers(0, 120), st.integers(0, 5), st.sampled_from([0, 2, 3]))


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(prefixes, st.lists(ranges, min_size=1, max_size=3)), min_size=1, max_size=4)
)
def test_compressed_hostlists_expand_to_the_hosts_in_order(groups: list) -> None:
    text, expected = [], []
    for prefix, parts in groups:
        body = []
        for low, extra, width in parts:
            high = low + extra
            body.append(f"{low:0{width}d}" + (f"-{high:0{width}d}" if extra else ""))
            pad = width if width and f"{low:0{width}d}".startswith("0") else 0
            expected += [f"{prefix}{n:0{pad}d}" for n in range(low, high + 1)]
        text.append(f"{prefix}[{','.join(body)}]")
    assert expand_hosts(",".join(text)) == expected


def assert_only_config_errors(call, *args) -> None:  # type: ignore[no-untyped-def]
    try:
        call(*args)
    except ConfigError as exc:
        assert exc.problems and all(p.accepted for p in exc.problems)
        assert len(str(exc)) < 4000


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet="nodegpu0123456789[]-,()x ", max_size=30))
def test_hostlist_and_counts_parsers_raise_only_config_errors(text: str) -> None:
    assert_only_config_errors(expand_hosts, text)
    assert_only_config_errors(expand_counts, text)


near_valid = st.sampled_from(
    ["2", "chief=1,worker=3", "worker=2;ps=1", "worker=w-{i}.svc", "worker=a:1,b:2", "[::1]",
     "::1", "{i}", "0", "1", "-1", "65536", "2222", "worker", "chief", "master", "", "3.5",
     "node[9-10]", "2(x2)", "gpu[01-03,07]", "2(x3),1", "node10", "nan", "1e400"]
)  # fmt: skip
values = st.one_of(near_valid, st.text(max_size=12), st.integers(-3, 70000).map(str))
names = st.sampled_from(
    [*NAMES, "JOB_COMPLETION_INDEX", "SLURM_PROCID", "SLURM_STEP_NODELIST",
     "SLURM_STEP_TASKS_PER_NODE", "SLURMD_NODENAME", "SLURM_LOCALID", "HTTPS_PROXY", "no_proxy"]
)  # fmt: skip
index_keys = st.one_of(
    st.sampled_from(["0", "1", "2", "01", " 0", "+1", "1_0", "\u0661", "-1", "1e0", ""]),
    st.text(alphabet="0123456789 +_-", max_size=3),
)
sparse = st.dictionaries(index_keys, st.sampled_from(["a:1", "b:2", "c:3", 1, None]), max_size=4)
sparse_configs = st.tuples(
    st.dictionaries(st.sampled_from(["chief", "worker", "ps"]), sparse, max_size=2),
    st.sampled_from(["worker", "chief", "ps"]),
    st.integers(0, 3),
).map(lambda t: json.dumps({"cluster": t[0], "task": {"type": t[1], "index": t[2]}}))
tf_configs = st.one_of(
    st.text(max_size=40),
    sparse_configs,
    st.recursive(
        st.one_of(st.none(), st.booleans(), st.integers(-2, 3), st.sampled_from(["worker", "a:1"])),
        lambda inner: st.one_of(
            st.lists(inner, max_size=3),
            st.dictionaries(
                st.sampled_from(
                    ["cluster", "task", "type", "index", "worker", "chief", "0", "master"]
                ),
                inner,
                max_size=3,
            ),
        ),
        max_leaves=12,
    ).map(json.dumps),
)


@settings(max_examples=500, deadline=None)
@given(
    st.sampled_from(["auto", "k8s", "slurm"]),
    st.dictionaries(names, values, max_size=8),
    st.one_of(st.none(), tf_configs),
    st.integers(0, 3),
)
def test_cluster_builder_raises_only_config_errors(
    mode: str, env: dict[str, str], tf_config: str | None, gpus: int
) -> None:
    if tf_config is not None:
        env["TF_CONFIG"] = tf_config
    assert_only_config_errors(cluster_plan, mode, env, Plan("TensorFlow", gpu_count=gpus))

"""The Graphviz rendering of a graph's control flow."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest
from hypothesis import HealthCheck, given, settings

from openinfer_jax.ir import Graph
from openinfer_jax.ir.dot import to_dot
from openinfer_jax.trace import parse, parse_file

from .fixtures import SEED_DIR, SEED_FILES
from .strategies import graphs


def _node_ids(dot: str, label_start: str) -> list[str]:
    return re.findall(rf'(n\d+) \[label="{re.escape(label_start)}', dot)


def test_blocks_are_clusters_and_loops_nested_clusters() -> None:
    dot = to_dot(parse_file(SEED_DIR / "001_condensed.graph"))
    assert dot.count('subgraph "cluster_') == 4  # entry, ok, bad + the loop
    assert 'label="block entry"' in dot and 'label="block ok"' in dot
    assert 'subgraph "cluster_0_5"' in dot and 'label="loop layers (l in 0..num_layers)"' in dot
    assert 'label="next l"' in dot  # the loop's back edge


def test_cache_reads_and_writes_have_distinct_marks() -> None:
    dot = to_dot(parse_file(SEED_DIR / "002_cache_ops.graph"))
    read = re.search(r'label="cache\.read [^"]*", ([^\]]*)\]', dot)
    write = re.search(r'label="cache\.write [^"]*", ([^\]]*)\]', dot)
    assert read and write
    assert 'shape="cylinder"' in read.group(1) and 'fillcolor="lightblue"' in read.group(1)
    assert 'shape="cylinder"' in write.group(1) and 'fillcolor="orange"' in write.group(1)


def test_branch_edges_point_at_target_blocks() -> None:
    dot = to_dot(parse_file(SEED_DIR / "002_branch.graph"))
    (cond,) = _node_ids(dot, "branch cond ok bad;")
    (call,) = _node_ids(dot, "branch algorithm;")
    assert re.search(rf'{cond} -> n\d+ \[[^\]]*label="then", lhead="cluster_1"\]', dot)
    assert re.search(rf'{cond} -> n\d+ \[[^\]]*label="else", lhead="cluster_2"\]', dot)
    assert re.search(rf'{call} -> n\d+ \[[^\]]*label="call", lhead="cluster_3"\]', dot)


def test_missing_branch_target_is_drawn_in_red() -> None:
    dot = to_dot(parse("block entry { branch nowhere; }"))
    assert 'label="missing block nowhere"' in dot and 'color="red"' in dot


def test_yield_and_await_edges_connect_entry_and_consumers() -> None:
    dot = to_dot(parse_file(SEED_DIR / "002_yield_await.graph"))
    (entry_yield,) = _node_ids(dot, "yield x;")[:1]
    assert len(re.findall(rf'{entry_yield} -> n\d+ \[[^\]]*label="yield x"', dot)) == 3
    assert len(re.findall(r'-> n\d+ \[[^\]]*label="resume x"', dot)) == 3


def test_labels_are_escaped() -> None:
    dot = to_dot(parse('volatile { a: f32; } block b { op f(a, s="say \\"hi\\"") >> a; }'))
    assert r'label="op f(a, s=\"say \\\"hi\\\"\") >> a;"' in dot


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz not installed")
@pytest.mark.parametrize("path", SEED_FILES, ids=lambda p: p.stem)
def test_graphviz_accepts_every_seed_drawing(path) -> None:  # type: ignore[no-untyped-def]
    done = subprocess.run(
        ["dot", "-Tsvg"],
        input=to_dot(parse_file(path)),
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert "<svg" in done.stdout


def test_repeated_equal_nodes_are_drawn_and_connected_separately() -> None:
    dot = to_dot(parse("block entry { yield x; yield x; await x; } block c { await x; yield x; }"))
    yields = _node_ids(dot, "yield x;")
    assert len(yields) == 3  # two in entry, one in the consumer
    # Both entry yields hand x to the consumer's await.
    for ident in yields[:2]:
        assert re.search(rf'{ident} -> n\d+ \[[^\]]*label="yield x"', dot)


def test_empty_blocks_and_loops_get_a_placeholder() -> None:
    dot = to_dot(parse("block entry { loop l (i in 0..2) { } } block other { }"))
    assert dot.count('label="(empty)"') == 2


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz not installed")
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graphs(max_vars=2, max_blocks=3))
def test_graphviz_accepts_drawings_of_generated_graphs(graph: Graph) -> None:
    done = subprocess.run(
        ["dot", "-Tsvg"], input=to_dot(graph), capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr

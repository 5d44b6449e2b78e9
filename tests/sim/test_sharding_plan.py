"""Sharding plans resolved against variables and an abstract mesh (no devices needed)."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st
from jax.sharding import AbstractMesh
from jax.sharding import PartitionSpec as P

from openinfer_jax.core.errors import ShardingError
from openinfer_jax.ir.nodes import MemoryKind
from openinfer_jax.sim.sharding_hlo import collectives_of
from openinfer_jax.sim.sharding_plan import (
    VariableLayout,
    auto_plan,
    parse_spec,
    resolve_plan,
    spec_text,
)

MESH = AbstractMesh((2, 4), ("data", "model"))


def layout(name: str, shape: tuple[int, ...], kind: MemoryKind = MemoryKind.VOLATILE,
           tensors: tuple[str, ...] = (), growing: frozenset[int] = frozenset(),
           auto: frozenset[int] = frozenset()) -> VariableLayout:  # fmt: skip
    return VariableLayout(name, kind, shape, growing, auto, tensors)


LAYOUTS = [
    layout("Wq", (64, 64), tensors=("layers.0.q", "layers.1.q")),
    layout("Wo", (64, 64), tensors=("layers.0.o", "layers.1.o")),
    layout("x", (8, 64), MemoryKind.DYNAMIC),
    layout("K", (16, 16, 8, 16), MemoryKind.PERSISTENT, growing=frozenset({0, 1})),
    layout("A", (16, 6), MemoryKind.PERSISTENT, auto=frozenset({1})),
    layout("step", (), MemoryKind.PERSISTENT),
]


def test_exact_glob_regex_and_tensor_names() -> None:
    plan = {
        "Wq": P(None, "model"),
        "layers.*.o": ("model", None),
        re.compile("K"): P(None, None, "model", None),
        "re:x": "data, None",
    }
    specs = resolve_plan(plan, LAYOUTS, MESH)
    assert specs == {
        "Wq": P(None, "model"),
        "Wo": P("model", None),
        "K": P(None, None, "model", None),
        "x": P("data", None),
    }


def test_exact_name_beats_pattern_and_first_pattern_wins() -> None:
    specs = resolve_plan({"W*": P("model"), "Wq": P(None, "model"), "Wo": None}, LAYOUTS, MESH)
    assert specs["Wq"] == P(None, "model")
    assert specs["Wo"] == P()


@pytest.mark.parametrize(
    ("plan", "words"),
    [
        ({"Wq": P(None, "tensor")}, ["'Wq'", "dim 1", "'tensor'", "data=2, model=4"]),
        ({"Wq": P(None, None, "model")}, ["'Wq'", "3 entries", "2 dims"]),
        (
            {"x": P(None, ("data", "model")), "Wq": P("model", "model")},
            ["'Wq'", "dim 1", "more than one"],
        ),
        ({"Wnope": P("model")}, ["'Wnope'", "matches no declared variable", "Wq"]),
        ({"A": P(None, "data")}, ["'A'", "dim 1", "@auto_dim"]),
        ({"x": P(None, "data"), "step": P("model")}, ["'step'", "1 entries", "0 dims"]),
        ({"Wq": 3}, ["'Wq'", "not a PartitionSpec"]),
        ({"Wq": "(model, None"}, ["'Wq'", "unbalanced"]),
        ({"Wq": "model-x"}, ["'Wq'", "not a mesh axis name"]),
        ({"re:(": P()}, ["bad regular expression"]),
    ],
)
def test_bad_plans_name_variable_and_dim(plan: dict, words: list[str]) -> None:
    with pytest.raises(ShardingError) as err:
        resolve_plan(plan, LAYOUTS, MESH)
    for word in words:
        assert word in str(err.value)


def test_not_divisible_names_dim_and_size() -> None:
    layouts = [layout("Wq", (64, 60))]
    with pytest.raises(ShardingError, match=r"'Wq'.*dim 1 of size 60 is not divisible by 8"):
        resolve_plan({"Wq": P(None, ("data", "model"))}, layouts, MESH)


def test_auto_plan_splits_last_fixed_divisible_dim() -> None:
    plan = auto_plan(LAYOUTS, MESH, "model")
    assert plan["Wq"] == P(None, "model")
    assert plan["K"] == P(None, None, None, "model")  # table axes grow: never chosen
    assert "x" not in plan and "step" not in plan
    assert plan["A"] == P("model")  # dim 1 grows (@auto_dim): the fixed dim 0 is split
    with pytest.raises(ShardingError, match="'tensor' does not exist"):
        auto_plan(LAYOUTS, MESH, "tensor")


axis_item = st.one_of(st.none(), st.sampled_from(["data", "model"]), st.just(("data", "model")))


@given(st.lists(axis_item, max_size=4))
def test_spec_text_round_trips(items: list) -> None:
    spec = P(*items)
    assert parse_spec(spec_text(spec), "plan") == spec


def test_collectives_of_counts_kinds_and_bytes() -> None:
    hlo = """
  %all-reduce = f32[8]{0} all-reduce(%x), channel_id=1, replica_groups={{0,1}}
  %ag = bf16[4,16]{1,0} all-gather(%y), dimensions={0}
  %ars = (f32[2,2]{1,0}, f32[2,2]{1,0}) all-reduce-start(%z)
  %ard = f32[2,2]{1,0} all-reduce-done(%ars)
  %add = f32[8]{0} add(%a, %b)
"""
    stats = collectives_of(hlo)
    assert stats.counts == {"all-reduce": 2, "all-gather": 1}
    # The async start's tuple holds operand and result: the result counts once.
    assert stats.bytes == {"all-reduce": 32 + 16, "all-gather": 128}
    assert stats.total == 3 and stats.to_dict()["total_bytes"] == 176
    assert stats.instances == [("all-reduce", 32), ("all-gather", 128), ("all-reduce", 16)]


def test_variable_layouts_of_a_real_graph(tmp_path) -> None:
    from openinfer_jax.oinf import ModelLoader
    from openinfer_jax.sim.sharding_models import DecoderConfig, decoder_graph, write_decoder
    from openinfer_jax.sim.sharding_plan import variable_layouts
    from openinfer_jax.trace import parse

    cfg = DecoderConfig(layers=2, d=32, heads=4, kv_heads=2, ffn=48, batch=3)
    write_decoder(tmp_path / "d.oinf", cfg)
    graph = parse(decoder_graph(cfg))
    with ModelLoader.open(tmp_path / "d.oinf") as model:
        sizes = {**model.sizevars, "num_layers": cfg.layers}

        def resolve(decl):
            return tuple(d if isinstance(d, int) else sizes[str(d)] for d in decl.dims)

        layouts = {
            lay.name: lay
            for lay in variable_layouts(graph, resolve, list(model.tensors), lambda d, i: 16)
        }
    assert layouts["K"].shape == (16, 16, 3, 2, 8) and layouts["K"].growing == {1}  # l is @fixed
    assert layouts["wq"].shape == (32, 32)
    assert layouts["wq"].tensors == ("layers.0.wq", "layers.1.wq")
    assert layouts["final_norm"].tensors == ("final_norm",)
    assert layouts["x"].kind is MemoryKind.DYNAMIC and layouts["x"].tensors == ()


def test_parse_spec_text_forms() -> None:
    assert parse_spec("(data, model), _", "plan") == P(("data", "model"), None)
    assert parse_spec(" None , model ", "plan") == P(None, "model")
    assert parse_spec("", "plan") == P()
    assert parse_spec(["model", None], "plan") == P("model", None)
    assert parse_spec(None, "plan") == P()

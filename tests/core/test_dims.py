"""One reading of dims for every layer (core/dims.py): the edge cases, and the four places
that resolve dims (validation, the reader, the simulator, the C emitter) agreeing on them."""

from __future__ import annotations

import numpy as np
import pytest

from openinfer_jax.core.dims import dim_factors, missing_sizes, resolve_dim, resolve_dims
from openinfer_jax.core.errors import GraphValidationError, SimulationError, SynthesisError
from openinfer_jax.emit.analysis import resolve_dims as emit_resolve_dims
from openinfer_jax.ir.validate_context import DimResolver
from openinfer_jax.oinf import ModelLoader, UnknownNameError, write_oinf
from openinfer_jax.sim import Simulator

SIZES = {"B": 2, "D": 8}


@pytest.mark.parametrize(
    ("dim", "factors", "size"),
    [
        (4, (4,), 4),
        (0, (0,), 0),
        (np.int64(3), (3,), 3),
        ("D", ("D",), 8),
        ("3*D", (3, "D"), 24),
        ("D*3", ("D", 3), 24),
        ("B*D", ("B", "D"), 16),
        ("0*D", (0, "D"), 0),
        ("E", ("E",), None),
        ("3*E", (3, "E"), None),
    ],
)
def test_dims_that_resolve(dim: object, factors: tuple[object, ...], size: int | None) -> None:
    assert dim_factors(dim) == factors
    assert resolve_dim(dim, SIZES.get) == size  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("dim", "message"),
    [
        (-1, "dimension -1 is negative"),
        (True, "must be an int or a string"),
        (2.5, "must be an int or a string"),
        ("-3", "malformed dimension '-3'"),
        ("3*-D", "malformed dimension"),
        ("3**D", "malformed dimension"),
        ("D*", "malformed dimension"),
        ("", "malformed dimension"),
        ("a..b", "malformed dimension"),
        ("3D", "malformed dimension"),
        (" 3 * D ", "malformed dimension"),  # not how the DSL prints it
        ("cfg.h*2", "malformed dimension"),  # the DSL's dims take no dotted names
    ],
)
def test_malformed_dims_are_refused(dim: object, message: str) -> None:
    with pytest.raises(GraphValidationError, match=message):
        dim_factors(dim)


def test_missing_sizes_lists_each_unknown_name_once() -> None:
    assert missing_sizes(["E*F", 4, "D", "F*E*2"], SIZES) == ["E", "F"]
    assert resolve_dims(["E*F"], SIZES) is None
    assert resolve_dims([4, "3*D", "B"], SIZES) == (4, 24, 2)


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> ModelLoader:
    path = tmp_path_factory.mktemp("dims") / "m.oinf"
    write_oinf(path, sizevars={"B": 2, "D": 8})
    return ModelLoader.open(path)


def test_every_layer_reads_a_dim_the_same_way(model: ModelLoader) -> None:
    graph = "graph { dynamic { x: f32[B, 3*D]; } block entry { return; } }"
    sim = Simulator(model, graph)
    for dims in ([4, "3*D", "B*D"], ["D*3"], [0]):
        want = resolve_dims(dims, model.sizevars)
        assert sim.resolve_dims(dims, "x") == want
        assert emit_resolve_dims(tuple(dims), model.sizevars, "x") == want
        assert model.resolve_shape(dims) == want
        assert DimResolver(model.sizevars).shape(dims) == want


def test_every_layer_refuses_a_malformed_or_unknown_dim(model: ModelLoader) -> None:
    sim = Simulator(model, "graph { dynamic { x: f32[B]; } block entry { return; } }")
    with pytest.raises(SimulationError, match=r"x: malformed dimension '-3'"):
        sim.resolve_dims(["-3"], "x")
    with pytest.raises(SimulationError, match="x: unknown size 'E'; the model defines: B, D"):
        sim.resolve_dims(["3*E"], "x")
    with pytest.raises(SynthesisError, match="x: malformed dimension '3\\*\\*D'"):
        emit_resolve_dims(("3**D",), model.sizevars, "x")
    with pytest.raises(SynthesisError, match="size 'E' is not a sizevar of the model"):
        emit_resolve_dims(("E",), model.sizevars, "x")
    with pytest.raises(GraphValidationError, match="malformed dimension"):
        model.resolve_dim("D*")
    with pytest.raises(UnknownNameError, match="unknown sizevar 'E'"):
        model.resolve_dim("2*E")
    assert DimResolver(model.sizevars).dim("3**D") is None  # validation reports it instead


def test_json_and_validation_refuse_a_malformed_dim() -> None:
    from dataclasses import replace

    from openinfer_jax.core.errors import DslSyntaxError
    from openinfer_jax.ir import from_json, to_json, validate
    from openinfer_jax.trace import parse

    graph = parse("graph { dynamic { x: f32[D]; } block entry { return; } }")
    doc = to_json(graph)
    doc["vars"][0]["dims"] = ["3**D"]
    with pytest.raises(DslSyntaxError, match=r"vars\[0\]\.dims\[0\]"):
        from_json(doc)
    # A graph built in Python skips the JSON reader; validation refuses it, even without a model.
    bad = replace(graph, vars=(replace(graph.vars[0], dims=("3**D",)),))
    with pytest.raises(GraphValidationError, match="malformed dimension '3\\*\\*D'"):
        validate(bad)

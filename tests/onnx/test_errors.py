"""Bad input: a typed `OnnxImportError` naming the node and op, exit code 1, no output."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper

from openinfer_jax.cli import main
from openinfer_jax.errors import ConversionError
from openinfer_jax.onnx import NeedsConstantError, OnnxImportError, import_model, import_onnx
from tests.onnx.helpers import FLOAT, INT64, make_model, tensor_info


def _one(node: object, inputs: list, outputs: list, opset: int = 17, inits: dict | None = None):
    return make_model([node], inputs, outputs, inits, opset=opset)


def test_error_is_a_conversion_error() -> None:
    assert issubclass(OnnxImportError, ConversionError)
    assert issubclass(NeedsConstantError, OnnxImportError)


def test_unparsable_file_cli_exit_1_and_no_output(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x08\x07garbage that is not protobuf\xff\xff")
    out = tmp_path / "out"
    assert main(["import", str(bad), "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "does not parse as an ONNX model" in err
    assert err.count("\n") == 1
    assert not out.exists()


def test_missing_file() -> None:
    with pytest.raises(OnnxImportError, match="no such file"):
        import_model("/nonexistent/model.onnx")


def test_unsupported_op_names_node_and_op() -> None:
    model = _one(
        helper.make_node("Unique", ["x"], ["y"], name="distinct"),
        [tensor_info("x", FLOAT, [3, 3])], [tensor_info("y", FLOAT, ["n"])],
    )  # fmt: skip
    with pytest.raises(OnnxImportError) as info:
        import_model(model)
    assert info.value.node == "distinct" and info.value.op == "Unique"
    assert str(info.value).startswith("node 'distinct' (Unique): op Unique is not supported")


def test_excluded_kinds_say_why() -> None:
    node = helper.make_node("Bernoulli", ["x"], ["y"])
    model = _one(node, [tensor_info("x", FLOAT, [3])], [tensor_info("y", FLOAT, [3])], opset=15)
    with pytest.raises(OnnxImportError, match="random numbers"):
        import_model(model)


def test_unsupported_attribute_is_named() -> None:
    node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2], storage_order=1)
    model = _one(
        node, [tensor_info("x", FLOAT, [1, 1, 4, 4])], [tensor_info("y", FLOAT, [1, 1, 2, 2])]
    )
    model.graph.node[0].attribute.append(helper.make_attribute("bogus_attr", 3))
    with pytest.raises(
        OnnxImportError, match=r"attribute bogus_attr is not supported \(supported: "
    ):
        import_model(model)


def test_opset_newer_than_supported() -> None:
    model = _one(
        helper.make_node("Relu", ["x"], ["y"]),
        [tensor_info("x", FLOAT, [3])],
        [tensor_info("y", FLOAT, [3])],
    )
    model.opset_import[0].version = 99
    with pytest.raises(
        OnnxImportError, match=r"opset 99 is newer than the importer supports \(up to 27\)"
    ):
        import_model(model)


def test_shape_computed_at_run_time_cannot_be_folded() -> None:
    nodes = [
        helper.make_node("Cast", ["s"], ["si"], to=TensorProto.INT64),
        helper.make_node("Reshape", ["x", "si"], ["y"], name="reshape_by_data"),
    ]
    model = make_model(
        nodes, [tensor_info("x", FLOAT, [2, 3]), tensor_info("s", FLOAT, [2])],
        [tensor_info("y", FLOAT, [3, 2])],
    )  # fmt: skip
    with pytest.raises(NeedsConstantError) as info:
        import_model(model)
    assert info.value.input_name == "s" and info.value.node == "reshape_by_data"
    assert "--const s=FILE.npy" in str(info.value)
    result = import_model(model, constants={"s": np.array([3.0, 2.0], np.float32)})
    assert "op reshape(x, shape=[3, 2]) >> y;" in result.text


def test_const_option_on_the_cli(tmp_path: Path) -> None:
    node = helper.make_node("Reshape", ["x", "shape"], ["y"])
    model = _one(
        node,
        [tensor_info("x", FLOAT, [2, 3]), tensor_info("shape", INT64, [2])],
        [tensor_info("y", FLOAT, [3, 2])],
    )
    src = tmp_path / "m.onnx"
    src.write_bytes(model.SerializeToString())
    np.save(tmp_path / "shape.npy", np.array([3, 2], np.int64))
    assert main(["import", str(src), "-o", str(tmp_path / "out"), "--quiet"]) == 1
    assert not (tmp_path / "out").exists()
    assert (
        main(
            [
                "import",
                str(src),
                "-o",
                str(tmp_path / "out"),
                "--quiet",
                "--const",
                f"shape={tmp_path / 'shape.npy'}",
            ]
        )
        == 0
    )
    assert "shape=[3, 2]" in (tmp_path / "out" / "m.graph").read_text()


def test_existing_outputs_need_force(tmp_path: Path) -> None:
    model = _one(
        helper.make_node("Relu", ["x"], ["y"]),
        [tensor_info("x", FLOAT, [3])],
        [tensor_info("y", FLOAT, [3])],
    )
    import_onnx(model, tmp_path, name="m")
    (tmp_path / "m.graph").write_text("keep")
    with pytest.raises(OnnxImportError, match="--force"):
        import_onnx(model, tmp_path, name="m")
    assert (tmp_path / "m.graph").read_text() == "keep"
    import_onnx(model, tmp_path, name="m", force=True)
    assert "op relu(x) >> y;" in (tmp_path / "m.graph").read_text()


def test_failed_import_leaves_directory_as_it_was(tmp_path: Path) -> None:
    model = _one(
        helper.make_node("Det", ["x"], ["y"]),
        [tensor_info("x", FLOAT, [4, 4])],
        [tensor_info("y", FLOAT, [])],
    )
    (tmp_path / "keep.txt").write_text("x")
    with pytest.raises(OnnxImportError):
        import_onnx(model, tmp_path, name="m")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.txt"]


@pytest.mark.parametrize(
    ("state", "message"),
    [
        ({"nope": "y"}, "'nope' is not a graph input"),
        ({"x": "nope"}, "'nope' is not a graph output"),
        ({"x": "z"}, r"the input is f32\[3\] but the output is f32\[1\]"),
    ],
)
def test_bad_state_pairs(state: dict[str, str], message: str) -> None:
    nodes = [helper.make_node("Relu", ["x"], ["y"]), helper.make_node("ReduceSum", ["x"], ["z"])]
    model = make_model(
        nodes,
        [tensor_info("x", FLOAT, [3])],
        [tensor_info("y", FLOAT, [3]), tensor_info("z", FLOAT, [1])],
    )
    with pytest.raises(OnnxImportError, match=message):
        import_model(model, state=state)


def test_string_input_has_no_dtype() -> None:
    model = _one(
        helper.make_node("Identity", ["x"], ["y"]),
        [tensor_info("x", TensorProto.STRING, [2])], [tensor_info("y", TensorProto.STRING, [2])],
    )  # fmt: skip
    with pytest.raises(OnnxImportError, match="graph input 'x' has element type STRING"):
        import_model(model)


def test_bad_cli_values(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = _one(
        helper.make_node("Relu", ["x"], ["y"]),
        [tensor_info("x", FLOAT, ["n"])],
        [tensor_info("y", FLOAT, ["n"])],
    )
    src = tmp_path / "m.onnx"
    src.write_bytes(model.SerializeToString())
    assert main(["import", str(src), "-o", str(tmp_path / "o"), "--dim", "n=x"]) == 1
    assert "--dim n=x: the value must be an integer" in capsys.readouterr().err
    assert main(["import", str(src), "-o", str(tmp_path / "o"), "--dim", "n"]) == 1
    assert "must be NAME=VALUE" in capsys.readouterr().err
    assert main(["import", str(src), "-o", str(tmp_path / "o"), "--dim", "n=0"]) == 1
    assert "a size must be >= 1" in capsys.readouterr().err
    assert main(["import", str(src), "-o", str(tmp_path / "o"), "--dim", "n=5"]) == 0
    assert "sizevars: n=5" in capsys.readouterr().out

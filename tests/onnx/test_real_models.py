"""Real exported models (tests/fixtures/onnx, made by scripts/make_onnx_fixtures.py with
torch.onnx.export) imported and run, against onnxruntime's recorded outputs.

- cnn_depthwise: a MobileNetV2-style CNN (depthwise convs, fused BatchNorm, ReLU6 as Clip);
  its three identical inverted-residual blocks become one loop.
- bert_encoder: a 4-layer BERT-style encoder (dynamic batch and seq, shape subgraphs,
  Erf GELU, additive attention mask); the layers become one loop over prefix tables.
- rnn_stream: GRU then LSTM, one frame per step, states kept in the runtime (--state).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from openinfer_jax.onnx import import_model
from tests.onnx.helpers import run_imported

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "onnx"
RNN_STATE = {"h_gru": "h_gru_out", "h_lstm": "h_lstm_out", "c_lstm": "c_lstm_out"}


def _reference(name: str) -> dict[str, np.ndarray]:
    with np.load(FIXTURES / f"{name}.npz") as data:
        return {k: data[k] for k in data.files}


@pytest.mark.parametrize("device", ["cpu", "numpy"])
def test_cnn_matches_onnxruntime(tmp_path: Path, device: str) -> None:
    ref = _reference("cnn_depthwise")
    result = import_model(FIXTURES / "cnn_depthwise.onnx", dims={"batch": 2})
    assert [(loop.count, loop.body_steps) for loop in result.report.loops] == [(3, 6)]
    assert "groups=96" in result.text  # depthwise convolutions stay single ops
    out = run_imported(result, tmp_path, [{"images": ref["images"]}], device)[0]
    np.testing.assert_allclose(out["logits"], ref["logits"], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("device", ["cpu", "numpy"])
def test_bert_matches_onnxruntime(tmp_path: Path, device: str) -> None:
    ref = _reference("bert_encoder")
    result = import_model(FIXTURES / "bert_encoder.onnx", dims={"batch": 2, "seq": 12})
    report = result.report
    assert [(loop.count, loop.tables) for loop in report.loops] == [(4, 16)]
    assert report.fused == {"Gelu": 4, "attention": 4, "linear+bias": 24, "reshape chains": 1}
    assert report.folded["Shape"] > 30  # the exporter's shape subgraphs are gone
    text = result.text
    assert "loop layers (l in 0..num_layers) {" in text
    assert '@pattern("layers.{l}.attn_ln.weight")' in text
    assert text.count("op gelu(") == 1 and text.count("op attention(") == 1
    assert text.count("op linear(") == 7  # 6 per layer in the loop, and the pooler
    feeds = {k: ref[k] for k in ("input_ids", "attention_mask", "token_type_ids")}
    out = run_imported(result, tmp_path, [feeds], device)[0]
    np.testing.assert_allclose(out["last_hidden_state"], ref["last_hidden_state"], atol=2e-5)
    np.testing.assert_allclose(out["pooled"], ref["pooled"], atol=2e-5)


@pytest.mark.parametrize("device", ["cpu", "numpy"])
def test_streaming_rnn_keeps_state_in_the_runtime(tmp_path: Path, device: str) -> None:
    ref = _reference("rnn_stream")
    result = import_model(FIXTURES / "rnn_stream.onnx", state=RNN_STATE)
    text = result.text
    assert "persistent {" in text and "cache.read h_gru_state >> h_gru;" in text
    assert "cache.write h_gru_out >> h_gru_state;" in text
    assert result.built.inputs == {"x": "x"}  # the states are no longer host inputs
    assert result.report.ops_used["gru_cell"] == 1 and result.report.ops_used["lstm_cell"] == 1
    frames = ref["frames"]
    outs = run_imported(
        result, tmp_path, [{"x": frames[:, t : t + 1]} for t in range(frames.shape[1])], device
    )
    np.testing.assert_allclose(np.concatenate([o["y"] for o in outs], 1), ref["y"], atol=1e-5)
    for name in ("h_gru", "h_lstm", "c_lstm"):
        np.testing.assert_allclose(outs[-1][f"{name}_out"], ref[name], atol=1e-5)


def _feeds(name: str, ref: dict[str, np.ndarray]) -> list[dict[str, np.ndarray]]:
    if name == "cnn_depthwise":
        return [{"images": ref["images"]}]
    if name == "bert_encoder":
        return [{k: ref[k] for k in ("input_ids", "attention_mask", "token_type_ids")}]
    return [{"x": ref["frames"][:, t : t + 1]} for t in range(ref["frames"].shape[1])]


_IMPORT = {
    "cnn_depthwise": {"dims": {"batch": 2}},
    "bert_encoder": {"dims": {"batch": 2, "seq": 12}},
    "rnn_stream": {"state": RNN_STATE},
}


@pytest.mark.parametrize(
    ("name", "target"),
    [("bert_encoder", "c"), ("rnn_stream", "c"), ("cnn_depthwise", "vulkan")],
)
def test_emitted_program_matches_the_simulator(tmp_path: Path, name: str, target: str) -> None:
    """The imported program as emitted C / emitted Vulkan gives the simulator's outputs
    (which match onnxruntime, above)."""
    from tests.emit.harness import parity

    if target == "vulkan":
        pytest.importorskip("kp")
    result = import_model(FIXTURES / f"{name}.onnx", **_IMPORT[name])
    result.write_oinf(tmp_path / "m.oinf")
    feeds = [
        {result.built.inputs[k]: v for k, v in f.items()} for f in _feeds(name, _reference(name))
    ]
    outputs = list(result.built.outputs.values())
    summary = parity(
        tmp_path, tmp_path / "m.oinf", result.graph, feeds, outputs=outputs, arch=target
    )
    assert summary["compared"] == len(outputs) * len(feeds)


def test_vulkan_device_matches_onnxruntime(tmp_path: Path) -> None:
    pytest.importorskip("kp")
    ref = _reference("bert_encoder")
    result = import_model(FIXTURES / "bert_encoder.onnx", **_IMPORT["bert_encoder"])
    out = run_imported(result, tmp_path, _feeds("bert_encoder", ref), "vulkan")[0]
    np.testing.assert_allclose(out["last_hidden_state"], ref["last_hidden_state"], atol=2e-5)


def test_import_edit_simulate_and_emit_from_the_shell(tmp_path: Path, capsys) -> None:
    """The user path with no Python: `openinfer import`, edit the graph text (run only the
    first two layers), `openinfer run` on the simulator and through the emitted C."""
    from openinfer_jax.cli import main

    ref = _reference("bert_encoder")
    out = tmp_path / "out"
    code = main(["import", str(FIXTURES / "bert_encoder.onnx"), "-o", str(out),
                 "--dim", "batch=2", "--dim", "seq=12"])  # fmt: skip
    assert code == 0, capsys.readouterr().err
    graph = out / "bert_encoder.graph"
    text = graph.read_text()
    assert text.count("loop layers (l in 0..num_layers) {") == 1
    edited = tmp_path / "two_layers.graph"
    edited.write_text(text.replace("(l in 0..num_layers)", "(l in 0..2)"))
    inputs = []
    for name in ("input_ids", "attention_mask", "token_type_ids"):
        np.save(tmp_path / f"{name}.npy", ref[name])
        inputs += ["--input", f"{name}={tmp_path / name}.npy"]
    pooled = {}
    for label, program, target in (("full", graph, "sim"), ("sim", edited, "sim"),
                                   ("c", edited, "c")):  # fmt: skip
        saved = tmp_path / f"{label}.npz"
        code = main(["run", "--model", str(out / "bert_encoder.oinf"), "--graph", str(program),
                     *inputs, "--fetch", "pooled", "--output", str(saved), "--target", target])  # fmt: skip
        assert code == 0, capsys.readouterr().err
        pooled[label] = np.load(saved)["pooled"][0]
    np.testing.assert_allclose(pooled["full"], ref["pooled"], atol=2e-5)
    np.testing.assert_allclose(pooled["c"], pooled["sim"], atol=1e-4)
    assert np.abs(pooled["sim"] - pooled["full"]).max() > 1e-2  # the edit took effect

"""Export the small real models tests/onnx/test_real_models.py imports, with onnxruntime's outputs.

Run with the peer venv (torch 2.13 CPU + onnxruntime, made by scripts/setup_peers.sh):

    build/peervenv/bin/python scripts/make_onnx_fixtures.py

Writes tests/fixtures/onnx/{cnn_depthwise,bert_encoder,rnn_stream}.onnx (random weights,
fixed seeds; torch.onnx.export's TorchScript exporter at opset 17) and, next to each, a
``.npz`` with the test inputs and onnxruntime's outputs (one thread). The models are small
(under 1 MB each) but exported the way real ones are: dynamic axes, shape subgraphs,
Erf-based GELU, a fused BatchNorm, ONNX GRU/LSTM ops.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import onnxruntime as ort
import torch
from torch import nn

OUT = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "onnx"
OPSET = 17


# ---- a MobileNetV2-style CNN ------------------------------------------------------------------
class InvertedResidual(nn.Module):
    """Expand (1x1), depthwise (3x3, groups=channels), project (1x1); residual when shapes agree."""

    def __init__(self, cin: int, cout: int, stride: int, expand: int) -> None:
        super().__init__()
        hidden = cin * expand
        self.residual = stride == 1 and cin == cout
        self.block = nn.Sequential(
            nn.Conv2d(cin, hidden, 1, bias=False), nn.BatchNorm2d(hidden), nn.ReLU6(),
            nn.Conv2d(hidden, hidden, 3, stride, 1, groups=hidden, bias=False),
            nn.BatchNorm2d(hidden), nn.ReLU6(),
            nn.Conv2d(hidden, cout, 1, bias=False), nn.BatchNorm2d(cout),
        )  # fmt: skip

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.block(x)
        return x + y if self.residual else y


class TinyMobileNet(nn.Module):
    """Stem, inverted residual stages (three identical blocks in a row), head."""

    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU6()
        )
        self.blocks = nn.Sequential(
            InvertedResidual(16, 24, 2, 4),
            InvertedResidual(24, 24, 1, 4),
            InvertedResidual(24, 24, 1, 4),
            InvertedResidual(24, 24, 1, 4),
            InvertedResidual(24, 32, 2, 4),
        )
        self.head = nn.Sequential(nn.Conv2d(32, 64, 1, bias=False), nn.BatchNorm2d(64), nn.ReLU6())
        self.fc = nn.Linear(64, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.head(self.blocks(self.stem(x)))
        x = nn.functional.adaptive_avg_pool2d(x, 1).flatten(1)
        return self.fc(x)


# ---- a BERT-style encoder (the layout of Hugging Face's BertModel) ------------------------------
class SelfAttention(nn.Module):
    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, hidden // heads
        self.query, self.key, self.value = (nn.Linear(hidden, hidden) for _ in range(3))

    def split(self, x: torch.Tensor) -> torch.Tensor:
        shape = (*x.size()[:-1], self.heads, self.head_dim)
        return x.view(shape).permute(0, 2, 1, 3)

    def forward(self, h: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        q, k, v = self.split(self.query(h)), self.split(self.key(h)), self.split(self.value(h))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim) + mask
        ctx = torch.matmul(nn.functional.softmax(scores, dim=-1), v).permute(0, 2, 1, 3)
        return ctx.reshape((*ctx.size()[:-2], self.heads * self.head_dim))


class Layer(nn.Module):
    def __init__(self, hidden: int, heads: int, inner: int) -> None:
        super().__init__()
        self.attention = SelfAttention(hidden, heads)
        self.attn_out, self.attn_ln = nn.Linear(hidden, hidden), nn.LayerNorm(hidden, eps=1e-12)
        self.ffn_in, self.ffn_out = nn.Linear(hidden, inner), nn.Linear(inner, hidden)
        self.ffn_ln = nn.LayerNorm(hidden, eps=1e-12)

    def forward(self, h: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        h = self.attn_ln(h + self.attn_out(self.attention(h, mask)))
        return self.ffn_ln(h + self.ffn_out(nn.functional.gelu(self.ffn_in(h))))


class TinyBert(nn.Module):
    def __init__(self, vocab: int = 1000, hidden: int = 64, heads: int = 4, layers: int = 4,
                 inner: int = 128, positions: int = 64) -> None:  # fmt: skip
        super().__init__()
        self.word, self.position = nn.Embedding(vocab, hidden), nn.Embedding(positions, hidden)
        self.token_type = nn.Embedding(2, hidden)
        self.emb_ln = nn.LayerNorm(hidden, eps=1e-12)
        self.layers = nn.ModuleList(Layer(hidden, heads, inner) for _ in range(layers))
        self.pooler = nn.Linear(hidden, hidden)
        self.register_buffer("position_ids", torch.arange(positions).unsqueeze(0))

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                token_type_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
        seq = input_ids.size(1)
        h = self.word(input_ids) + self.position(self.position_ids[:, :seq])
        h = self.emb_ln(h + self.token_type(token_type_ids))
        mask = (1.0 - attention_mask[:, None, None, :].to(h.dtype)) * torch.finfo(h.dtype).min
        for layer in self.layers:
            h = layer(h, mask)
        return h, torch.tanh(self.pooler(h[:, 0]))


# ---- a streaming recurrent model: GRU then LSTM, one frame per step -----------------------------
class Stream(nn.Module):
    def __init__(self, features: int = 20, hidden: int = 32, classes: int = 6) -> None:
        super().__init__()
        self.gru = nn.GRU(features, hidden, batch_first=True)
        self.lstm = nn.LSTM(hidden, hidden, batch_first=True)
        self.out = nn.Linear(hidden, classes)

    def forward(self, x: torch.Tensor, h_gru: torch.Tensor, h_lstm: torch.Tensor,
                c_lstm: torch.Tensor) -> tuple[torch.Tensor, ...]:  # fmt: skip
        y, h_gru = self.gru(x, h_gru)
        y, (h_lstm, c_lstm) = self.lstm(y, (h_lstm, c_lstm))
        return self.out(y), h_gru, h_lstm, c_lstm


def _randomize_norms(model: nn.Module, rng: torch.Generator) -> None:
    """Non-trivial BatchNorm statistics and norm affine params (fresh ones are 0/1)."""
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.copy_(torch.randn(m.num_features, generator=rng) * 0.1)
            m.running_var.copy_(torch.rand(m.num_features, generator=rng) + 0.5)
        if isinstance(m, (nn.BatchNorm2d, nn.LayerNorm)):
            m.weight.data.copy_(1 + 0.1 * torch.randn(m.weight.shape, generator=rng))
            m.bias.data.copy_(0.1 * torch.randn(m.bias.shape, generator=rng))


def _export(model: nn.Module, name: str, args: tuple[torch.Tensor, ...], inputs: list[str],
            outputs: list[str], dynamic: dict[str, dict[int, str]]) -> Path:  # fmt: skip
    path = OUT / f"{name}.onnx"
    torch.onnx.export(
        model, args, str(path), dynamo=False, opset_version=OPSET, input_names=inputs,
        output_names=outputs, dynamic_axes=dynamic, do_constant_folding=True,
    )  # fmt: skip
    return path


def _run_ort(path: Path, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return [np.asarray(r) for r in session.run(None, feeds)]


def main() -> None:
    """Export the three fixtures and record onnxruntime's outputs."""
    OUT.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    rng = torch.Generator().manual_seed(1)
    np_rng = np.random.default_rng(2)

    cnn = TinyMobileNet().eval()
    _randomize_norms(cnn, rng)
    images = np_rng.standard_normal((2, 3, 32, 32)).astype(np.float32)
    with torch.no_grad():
        path = _export(cnn, "cnn_depthwise", (torch.from_numpy(images),), ["images"], ["logits"],
                       {"images": {0: "batch"}, "logits": {0: "batch"}})  # fmt: skip
    np.savez(path.with_suffix(".npz"), images=images, logits=_run_ort(path, {"images": images})[0])

    bert = TinyBert().eval()
    _randomize_norms(bert, rng)
    ids = np_rng.integers(0, 1000, (2, 12)).astype(np.int64)
    mask = np.ones((2, 12), np.int64)
    mask[1, 9:] = 0
    types = np.zeros((2, 12), np.int64)
    types[:, 6:] = 1
    feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
    dyn = {"batch": 0, "seq": 1}
    with torch.no_grad():
        path = _export(
            bert, "bert_encoder", tuple(torch.from_numpy(v) for v in feeds.values()), list(feeds),
            ["last_hidden_state", "pooled"],
            {**{k: {v: k for k, v in dyn.items()} for k in feeds},
             "last_hidden_state": {0: "batch", 1: "seq"}, "pooled": {0: "batch"}},
        )  # fmt: skip
    hidden, pooled = _run_ort(path, feeds)
    np.savez(path.with_suffix(".npz"), **feeds, last_hidden_state=hidden, pooled=pooled)

    stream = Stream().eval()
    frames = np_rng.standard_normal((1, 8, 20)).astype(np.float32)
    zeros = np.zeros((1, 1, 32), np.float32)
    with torch.no_grad():
        path = _export(
            stream, "rnn_stream",
            (torch.from_numpy(frames[:, :1]), *(torch.from_numpy(zeros) for _ in range(3))),
            ["x", "h_gru", "h_lstm", "c_lstm"], ["y", "h_gru_out", "h_lstm_out", "c_lstm_out"], {},
        )  # fmt: skip
    # Step by step, feeding the states back: what a streaming runtime does.
    states = [zeros, zeros, zeros]
    ys = []
    for t in range(frames.shape[1]):
        y, *states = _run_ort(path, dict(zip(["x", "h_gru", "h_lstm", "c_lstm"],
                                             [frames[:, t : t + 1], *states], strict=True)))  # fmt: skip
        ys.append(y)
    np.savez(path.with_suffix(".npz"), frames=frames, y=np.concatenate(ys, axis=1),
             h_gru=states[0], h_lstm=states[1], c_lstm=states[2])  # fmt: skip
    for f in sorted(OUT.iterdir()):
        print(f"{f.relative_to(OUT.parents[2])}: {f.stat().st_size / 1e3:.0f} kB")


if __name__ == "__main__":
    main()

"""The workloads of bench/bench_edge.py, shared by its two sides.

Pure Python + NumPy (no openinfer_jax import): bench_edge.py (project venv) and
edge_peers.py (peer venv, torch + onnxruntime + llama.cpp) both import it, so the graph, the
weights and the torch module of each workload come from one description.

* `CNN_BLOCKS`: an EfficientNet-Lite0-shaped CNN (MobileNetV2 blocks without
  squeeze-excite, ReLU6, batch norm folded into conv biases): stem 3x3/2, 16 inverted
  residual blocks with depthwise 3x3 and 5x5 convolutions, a 1x1 head to 1280 channels,
  global average pooling and a 1000-way linear layer; random weights.
* The MiniLM encoder is examples/minilm/encoder.py's graph on the real checkpoint.
* SmolLM2 decode is examples/smollm2/decoder.py's graph on the packaged GGUF.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# (expand ratio, kernel, stride, out channels, repeats) of EfficientNet-Lite0.
CNN_BLOCKS: tuple[tuple[int, int, int, int, int], ...] = (
    (1, 3, 1, 16, 1),
    (6, 3, 2, 24, 2),
    (6, 5, 2, 40, 2),
    (6, 3, 2, 80, 3),
    (6, 5, 1, 112, 3),
    (6, 5, 2, 192, 4),
    (6, 3, 1, 320, 1),
)
CNN_STEM, CNN_HEAD, CNN_CLASSES = 32, 1280, 1000


@dataclass(frozen=True)
class Conv:
    """One convolution of the CNN (bias always, ReLU6 when `act`)."""

    name: str
    cin: int
    cout: int
    kernel: int
    stride: int
    groups: int
    act: bool


@dataclass(frozen=True)
class Block:
    """An inverted residual block: its convolutions and whether the input is added back."""

    convs: tuple[Conv, ...]
    residual: bool


def cnn_layers() -> tuple[Conv, list[Block], Conv]:
    """The stem, the blocks and the head convolution."""
    stem = Conv("stem", 3, CNN_STEM, 3, 2, 1, True)
    blocks: list[Block] = []
    cin = CNN_STEM
    for expand, kernel, stride, cout, repeats in CNN_BLOCKS:
        for r in range(repeats):
            i = len(blocks)
            mid = cin * expand
            convs = []
            if expand != 1:
                convs.append(Conv(f"b{i}e", cin, mid, 1, 1, 1, True))
            convs.append(Conv(f"b{i}d", mid, mid, kernel, stride if r == 0 else 1, mid, True))
            convs.append(Conv(f"b{i}p", mid, cout, 1, 1, 1, False))
            blocks.append(Block(tuple(convs), r > 0 and cin == cout))
            cin = cout
    head = Conv("head", cin, CNN_HEAD, 1, 1, 1, True)
    return stem, blocks, head


def cnn_weights(seed: int = 0) -> dict[str, np.ndarray]:
    """Random weights (He-scaled so activations stay in range): `<conv>.w` [out, in/groups,
    k, k], `<conv>.b` [out], `fc.w` [1000, 1280], `fc.b`."""
    rng = np.random.default_rng(seed)
    stem, blocks, head = cnn_layers()
    out: dict[str, np.ndarray] = {}
    for conv in [stem, *(c for b in blocks for c in b.convs), head]:
        fan_in = conv.cin // conv.groups * conv.kernel * conv.kernel
        shape = (conv.cout, conv.cin // conv.groups, conv.kernel, conv.kernel)
        out[f"{conv.name}.w"] = (rng.standard_normal(shape) * np.sqrt(1.0 / fan_in)).astype(
            np.float32
        )
        out[f"{conv.name}.b"] = (rng.standard_normal(conv.cout) * 0.05).astype(np.float32)
    out["fc.w"] = (rng.standard_normal((CNN_CLASSES, CNN_HEAD)) * np.sqrt(1.0 / CNN_HEAD)).astype(
        np.float32
    )
    out["fc.b"] = np.zeros(CNN_CLASSES, np.float32)
    return out


def cnn_graph(size: int = 224) -> str:
    """The CNN as graph{} text on a [1, 3, size, size] image; output `logits` [1, 1000]."""
    stem, blocks, head = cnn_layers()
    decls: list[str] = []
    assigns: list[str] = []
    body: list[str] = []
    shapes = {"x": (3, size)}
    count = [0]

    def conv(src: str, c: Conv) -> str:
        _channels, hw = shapes[src]
        pad = c.kernel // 2
        out_hw = (hw + 2 * pad - c.kernel) // c.stride + 1
        count[0] += 1
        dst = f"t{count[0]}"
        shapes[dst] = (c.cout, out_hw)
        decls.append(
            f'    {c.name}_w: f32[{c.cout}, {c.cin // c.groups}, {c.kernel}, {c.kernel}] @ref("{c.name}.w");'
        )
        decls.append(f'    {c.name}_b: f32[{c.cout}] @ref("{c.name}.b");')
        assigns.append(f"    assign {dst}: f32[1, {c.cout}, {out_hw}, {out_hw}];")
        params = f"strides=[{c.stride}, {c.stride}], pads=[{pad}, {pad}, {pad}, {pad}]"
        if c.groups > 1:
            params += f", groups={c.groups}"
        body.append(f"    op conv2d({src}, {c.name}_w, {c.name}_b, {params}) >> {dst};")
        if c.act:
            body.append(f"    op clamp({dst}, min=0.0, max=6.0) >> {dst};")
        return dst

    cur = conv("x", stem)
    for block in blocks:
        start = cur
        for c in block.convs:
            cur = conv(cur, c)
        if block.residual:
            body.append(f"    op add({cur}, {start}) >> {cur};")
    cur = conv(cur, head)
    decls.append(f'    fc_w: f32[{CNN_CLASSES}, {CNN_HEAD}] @ref("fc.w");')
    decls.append(f'    fc_b: f32[{CNN_CLASSES}] @ref("fc.b");')
    assigns.append(f"    assign pooled: f32[1, {CNN_HEAD}, 1, 1];")
    assigns.append(f"    assign flat: f32[1, {CNN_HEAD}];")
    assigns.append(f"    assign logits: f32[1, {CNN_CLASSES}];")
    body.append(f"    op global_average_pool({cur}) >> pooled;")
    body.append(f"    op reshape(pooled, shape=[1, {CNN_HEAD}]) >> flat;")
    body.append("    op linear(flat, fc_w, fc_b) >> logits;")
    return "\n".join(
        [
            "graph {",
            f"  dynamic {{ x: f32[1, 3, {size}, {size}]; }}",
            "  volatile {",
            *decls,
            "  }",
            "  block entry {",
            *assigns,
            *body,
            "    return;",
            "  }",
            "}",
            "",
        ]
    )


def cnn_torch(weights: dict[str, np.ndarray]):  # pragma: no cover - runs in the peer venv
    """The same CNN as a torch module (NCHW), loaded with `weights`."""
    import torch
    from torch import nn

    stem, blocks, head = cnn_layers()

    def make(c: Conv) -> nn.Conv2d:
        layer = nn.Conv2d(c.cin, c.cout, c.kernel, c.stride, c.kernel // 2, groups=c.groups)
        layer.weight.data = torch.from_numpy(weights[f"{c.name}.w"])
        layer.bias.data = torch.from_numpy(weights[f"{c.name}.b"])
        return layer

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = make(stem)
            self.blocks = nn.ModuleList(nn.ModuleList(make(c) for c in b.convs) for b in blocks)
            self.head = make(head)
            self.fc = nn.Linear(CNN_HEAD, CNN_CLASSES)
            self.fc.weight.data = torch.from_numpy(weights["fc.w"])
            self.fc.bias.data = torch.from_numpy(weights["fc.b"])

        def forward(self, x):
            x = torch.clamp(self.stem(x), 0.0, 6.0)
            for spec, convs in zip(blocks, self.blocks):
                start = x
                for c, layer in zip(spec.convs, convs):
                    x = layer(x)
                    if c.act:
                        x = torch.clamp(x, 0.0, 6.0)
                if spec.residual:
                    x = x + start
            x = torch.clamp(self.head(x), 0.0, 6.0)
            x = torch.mean(x, dim=(2, 3))
            return self.fc(x)

    return Net().eval()


def encoder_torch(
    weights: dict[str, np.ndarray], layers: int, heads: int, eps: float
):  # pragma: no cover
    """examples/minilm/encoder.py's graph as a torch module over the same `.oinf` tensors
    (inputs ids, types, positions, additive mask [B, 1, 1, S], pooling weights [B, S, 1])."""
    import torch
    from torch import nn
    from torch.nn import functional as F

    def t(name: str) -> torch.Tensor:
        return torch.from_numpy(weights[name])

    class Encoder(nn.Module):
        def forward(self, ids, types, positions, mask, pool):
            h = F.embedding(ids, t("tok_emb.weight")) + F.embedding(positions, t("pos_emb.weight"))
            h = h + F.embedding(types, t("type_emb.weight"))
            d = h.shape[-1]
            h = F.layer_norm(h, (d,), t("emb_ln.weight"), t("emb_ln.bias"), eps)
            b, s, hd = h.shape[0], h.shape[1], d // heads
            for layer in range(layers):

                def lin(x, name, layer=layer):
                    return F.linear(x, t(f"{name}.weight.{layer}"), t(f"{name}.bias.{layer}"))

                def split(x):
                    return x.reshape(b, s, heads, hd).transpose(1, 2)

                q, k, v = split(lin(h, "q")), split(lin(h, "k")), split(lin(h, "v"))
                scores = torch.matmul(q, k.transpose(-1, -2)) * (1.0 / hd**0.5) + mask
                o = torch.matmul(torch.softmax(scores, dim=-1), v)
                a = lin(o.transpose(1, 2).reshape(b, s, d), "attn_out")
                h = F.layer_norm(
                    h + a, (d,), t(f"attn_ln.weight.{layer}"), t(f"attn_ln.bias.{layer}"), eps
                )
                f = F.gelu(lin(h, "ffn_in"))
                h = F.layer_norm(h + lin(f, "ffn_out"), (d,), t(f"ffn_ln.weight.{layer}"),
                                 t(f"ffn_ln.bias.{layer}"), eps)  # fmt: skip
            pooled = torch.sum(h * pool, dim=1)
            return pooled * torch.rsqrt(torch.sum(pooled * pooled, dim=1, keepdim=True))

    return Encoder().eval()


def encoder_inputs(batch: int, seq: int, vocab: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Token ids of a padded batch (the last sentence one third padding) and the derived
    inputs of the encoder graph."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(1000, vocab, (batch, seq)).astype(np.int32)
    valid = np.ones((batch, seq), np.float32)
    valid[-1, seq - seq // 3 :] = 0.0
    ids[valid == 0] = 0
    return {
        "ids": ids,
        "types": np.zeros((batch, seq), np.int32),
        "positions": np.broadcast_to(np.arange(seq, dtype=np.int32), (batch, seq)).copy(),
        "mask": ((1.0 - valid) * -1e9).reshape(batch, 1, 1, seq).astype(np.float32),
        "pool": (valid / valid.sum(1, keepdims=True)).reshape(batch, seq, 1).astype(np.float32),
    }

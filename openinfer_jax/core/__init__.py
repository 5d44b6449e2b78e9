"""The bottom layer: what every other package may use and that uses nothing of theirs.

- `openinfer_jax.core.errors`: the `OpenInferError` hierarchy (public as `openinfer_jax.errors`).
- `openinfer_jax.core.dtypes`: element types (`DType`) with the `.oinf` codes, packing.
- `openinfer_jax.core.blocks`: block quantization schemes and layouts (q8_0, q4_0, q4_1).
- `openinfer_jax.core.names`: small value types shared by the IR and the op registry (`VarName`).

Nothing here imports JAX or another `openinfer_jax` package (tests/test_layering.py checks it).
"""

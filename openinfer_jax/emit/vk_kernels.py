"""Vulkan kernels for the emitted program: GLSL compute shaders (compiled to SPIR-V with
glslc at synthesis time) and the C host wrappers that dispatch them.

The Vulkan target covers the f32 elementwise ops of `ELEMENTWISE_GLSL` and 2-D f32 matmul;
any other op or dtype is a `SynthesisError` naming the node. Every tensor lives in the one
arena buffer; shaders index it with element offsets passed as push constants. A grid-stride
loop lets any size run with at most 65535 workgroups of 64 invocations.
"""

from __future__ import annotations

import math
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from openinfer_jax.emit.analysis import OpInfo
from openinfer_jax.errors import SynthesisError
from openinfer_jax.oinf.dtypes import DType

__all__ = ["ELEMENTWISE_GLSL", "VkKernel", "compile_spirv", "render_vk_kernel", "vk_supports"]

_NAN = "uintBitsToFloat(0x7fc00000u)"
_INF = "uintBitsToFloat(0x7f800000u)"

#: f32 expressions over x0, x1, x2 with `{param}` slots (literals), NaN-propagating like the
#: registry's references.
ELEMENTWISE_GLSL: dict[str, str] = {
    "add": "x0 + x1",
    "sub": "x0 - x1",
    "mul": "x0 * x1",
    "div": "(x1 == 0.0) ? {div_by_zero_mask} : x0 / x1",
    "max": "(isnan(x0) || x0 > x1) ? x0 : x1",
    "min": "(isnan(x0) || x0 < x1) ? x0 : x1",
    "neg": "-x0",
    "abs": "abs(x0)",
    "relu": "nan_clamp((x0 < 0.0) ? x0 * {negative_slope} : x0, {clamp_min}, {clamp_max})",
    "clamp": "nan_clamp(x0, {min}, {max})",
    "exp": "exp(x0)",
    "log": "log(x0)",
    "sqrt": "sqrt(x0)",
    "rsqrt": "1.0 / sqrt(x0)",
    "tanh": "tanh(x0)",
    "sigmoid": "1.0 / (1.0 + exp(-x0))",
    "silu": "x0 / (1.0 + exp(-x0))",
    "fill": "{value}",
}

_HEADER = """#version 450
layout(local_size_x = 64) in;
layout(std430, binding = 0) buffer Arena { float data[]; };
float nan_clamp(float y, float lo, float hi) { return isnan(y) ? y : min(max(y, lo), hi); }
"""


@dataclass(frozen=True)
class VkKernel:
    """One Vulkan kernel: its GLSL source and the C host wrapper that dispatches it."""

    glsl: str
    host: str


def vk_supports(info: OpInfo) -> bool:
    """True when the Vulkan target has a kernel for this op and these dtypes."""
    if any(d is not DType.F32 for d in (*info.in_dtypes, info.out_dtype)):
        return False
    if info.opdef.name == "matmul":
        return all(len(s) == 2 for s in info.in_shapes) and info.params.get("acc") is None
    return info.opdef.name in ELEMENTWISE_GLSL


def _glsl_float(value: Any) -> str:
    v = float(value)
    if math.isnan(v):
        return _NAN
    if math.isinf(v):
        return _INF if v > 0 else f"(-{_INF})"
    return repr(v)


def render_vk_kernel(name: str, pipeline: int, info: OpInfo, where: str) -> VkKernel:
    """GLSL + host wrapper for one op call.

    Raises:
        SynthesisError: the op/dtype is outside the Vulkan subset, naming `where`.
    """
    if not vk_supports(info):
        dts = ", ".join(d.short for d in info.in_dtypes)
        raise SynthesisError(
            f"{where}: op {info.opdef.name}({dts}) is not supported by the Vulkan target (f32 only: "
            f"{', '.join(sorted(ELEMENTWISE_GLSL))}, and 2-D matmul); emit the C target instead"
        )
    if info.opdef.name == "matmul":
        return _matmul(name, pipeline)
    return _elementwise(name, pipeline, info, where)


def _elementwise(name: str, pipeline: int, info: OpInfo, where: str) -> VkKernel:
    expr = ELEMENTWISE_GLSL[info.opdef.name]
    defaults = {"div_by_zero_mask": math.nan, "min": -math.inf, "max": math.inf}
    for key, value in info.params.items():
        if type(value).__name__ == "VarName":
            raise SynthesisError(
                f"{where}: param {key}={value} names a variable; the Vulkan target needs literals"
            )
        expr = expr.replace(
            f"{{{key}}}", _glsl_float(defaults.get(key) if value is None else value)
        )
    n = len(info.in_dtypes)
    fields = "uint n; uint o; " + " ".join(f"uint a{k}; uint n{k};" for k in range(n))
    loads = " ".join(f"float x{k} = data[p.a{k} + i % p.n{k}];" for k in range(n))
    glsl = (
        _HEADER
        + f"layout(push_constant) uniform Push {{ {fields} }} p;\n"
        + "void main() {\n"
        + "    uint stride = gl_NumWorkGroups.x * 64u;\n"
        + "    for (uint i = gl_GlobalInvocationID.x; i < p.n; i += stride) {\n"
        + f"        {loads}\n"
        + f"        data[p.o + i] = {expr};\n"
        + "    }\n}\n"
    )
    args = "".join(f", const oi_tensor *x{k}_t" for k in range(n))
    ins = ", ".join(f"x{k}_t" for k in range(n))
    host = f"""static int {name}(oi_tensor *o{args}) {{
    const oi_tensor *in[{n}] = {{{ins}}};
    uint32_t p[{2 + 2 * n}];
    oi_iter it;
    int k, rc = oi_iter_init(&it, o, {n}, in, {int(info.opdef.broadcast)});
    if (rc) return rc;
    p[0] = (uint32_t)it.numel;
    p[1] = OI_VK_OFF(o);
    for (k = 0; k < {n}; k++) {{
        int64_t nk = oi_numel(in[k]);
        if (nk != it.numel && !oi_vk_suffix(in[k], o)) {{
            oi_set_error("the Vulkan target broadcasts only equal shapes, scalars and trailing dims");
            return OI_ERR_SHAPE;
        }}
        p[2 + 2 * k] = OI_VK_OFF(in[k]);
        p[3 + 2 * k] = (uint32_t)(nk ? nk : 1);
    }}
    return oi_vk_dispatch({pipeline}, p, sizeof p, oi_vk_groups(it.numel));
}}
"""
    return VkKernel(glsl, host)


def _matmul(name: str, pipeline: int) -> VkKernel:
    glsl = (
        _HEADER
        + "layout(push_constant) uniform Push { uint m; uint k; uint n; uint a; uint b; uint o; } p;\n"
        + "void main() {\n"
        + "    uint stride = gl_NumWorkGroups.x * 64u;\n"
        + "    for (uint t = gl_GlobalInvocationID.x; t < p.m * p.n; t += stride) {\n"
        + "        uint i = t / p.n, j = t % p.n;\n"
        + "        float s = 0.0;\n"
        + "        for (uint q = 0u; q < p.k; q++) s += data[p.a + i * p.k + q] * data[p.b + q * p.n + j];\n"
        + "        data[p.o + t] = s;\n"
        + "    }\n}\n"
    )
    host = f"""static int {name}(oi_tensor *o, const oi_tensor *x0, const oi_tensor *x1) {{
    uint32_t p[6];
    int64_t dims[2];
    int rc;
    if (x0->ndim != 2 || x1->ndim != 2 || x0->dims[1] != x1->dims[0]) {{
        oi_set_error("matmul: the Vulkan target needs [M, K] x [K, N] inputs");
        return OI_ERR_SHAPE;
    }}
    dims[0] = x0->dims[0];
    dims[1] = x1->dims[1];
    rc = oi_set_shape(o, 2, dims);
    if (rc) return rc;
    p[0] = (uint32_t)dims[0]; p[1] = (uint32_t)x0->dims[1]; p[2] = (uint32_t)dims[1];
    p[3] = OI_VK_OFF(x0); p[4] = OI_VK_OFF(x1); p[5] = OI_VK_OFF(o);
    return oi_vk_dispatch({pipeline}, p, sizeof p, oi_vk_groups(dims[0] * dims[1]));
}}
"""
    return VkKernel(glsl, host)


def compile_spirv(shaders: dict[str, str]) -> dict[str, bytes]:
    """Compile GLSL compute shaders (name -> source) to SPIR-V with glslc, in one temp dir.

    Raises:
        SynthesisError: glslc is missing or rejects a shader (its message included).
    """
    glslc = shutil.which("glslc")
    if glslc is None:
        raise SynthesisError(
            "the Vulkan target needs glslc (shaderc) on PATH to compile its shaders"
        )
    out: dict[str, bytes] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, source in sorted(shaders.items()):
            src = Path(tmp) / f"{name}.comp"
            src.write_text(source)
            spv = Path(tmp) / f"{name}.spv"
            result = subprocess.run([glslc, "--target-env=vulkan1.0", "-O", str(src), "-o", str(spv)],
                                    capture_output=True, text=True)  # fmt: skip
            if result.returncode != 0:
                raise SynthesisError(f"glslc rejected shader {name}: {result.stderr.strip()[:500]}")
            out[name] = spv.read_bytes()
    return out

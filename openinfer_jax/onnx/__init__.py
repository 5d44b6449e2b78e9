"""Import ONNX models as editable graph{} programs (`openinfer import model.onnx -o out/`).

`import_onnx` writes ``NAME.graph`` (readable DSL text: one op per line, variables named
after the ONNX values, repeated layers as loops over prefix tables), ``NAME.oinf`` (the
initializers, symbolic input dims as sizevars) and a short report; `import_model` does the
same in memory. Problems are `OnnxImportError`s naming the node and op. See docs/onnx.md.

The `onnx` package is imported only when a model is imported.
"""

from openinfer_jax.onnx.api import ImportResult, import_model, import_onnx, load_model
from openinfer_jax.onnx.errors import NeedsConstantError, OnnxImportError
from openinfer_jax.onnx.report import ImportReport

__all__ = [
    "ImportReport",
    "ImportResult",
    "NeedsConstantError",
    "OnnxImportError",
    "import_model",
    "import_onnx",
    "load_model",
]

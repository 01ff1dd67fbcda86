"""mi_certify.generator: ONNX import, spec parsing, LUT, emitters, build pipeline, CLI."""

from .pipeline import BuildOptions, BuildResult, build
from .errors import BuildError, MiCertifyError, ModelImportError, ModelMismatchError, SpecError
from .ir import ControllerIR
from .onnx_import import cross_check, import_onnx
from .spec import Spec, load_spec

__all__ = ["BuildError", "BuildOptions", "BuildResult", "ControllerIR", "MiCertifyError", "ModelImportError",
           "ModelMismatchError", "Spec", "SpecError", "build", "cross_check", "import_onnx", "load_spec"]

"""mi_certify.generator: ONNX import, spec parsing, LUT, emitters, build pipeline, CLI.

The public names below are loaded on first use (PEP 562), so importing one module of
the package (``mi_certify.generator.ir``, say) loads that module and its own imports
only, never the pipeline on top of everything (docs/architecture.md).
"""

from .exports import lazy_exports

_PUBLIC = {
    "BuildError": "errors", "MiCertifyError": "errors", "ModelImportError": "errors",
    "ModelMismatchError": "errors", "SpecError": "errors", "ToolMissingError": "errors",
    "ControllerIR": "ir", "Spec": "spec", "load_spec": "spec",
    "LoadedModel": "model", "load_model": "model",
    "cross_check": "onnx_import", "import_onnx": "onnx_import",
    "BuildOptions": "pipeline", "BuildResult": "pipeline", "build": "pipeline",
}

__getattr__, __dir__, __all__ = lazy_exports(__name__, _PUBLIC, globals())

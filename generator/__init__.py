"""mi_certify.generator: ONNX import, spec parsing, LUT, emitters, build pipeline, CLI.

The public names below are loaded on first use (PEP 562), so importing one module of
the package (``mi_certify.generator.core.ir``, say) loads that module and its own imports
only, never the pipeline on top of everything (docs/architecture.md). The build itself is
``mi_certify.generator.pipeline.runner.build`` (``mi_certify.generator.build`` is the build layer's
subpackage: distillation and emitters).
"""

from mi_certify.generator.core.exports import lazy_exports

_PUBLIC = {
    "BuildError": "core.errors", "MiCertifyError": "core.errors", "ModelImportError": "core.errors",
    "ModelMismatchError": "core.errors", "SpecError": "core.errors", "ToolMissingError": "core.errors",
    "ControllerIR": "core.ir", "Spec": "core.spec", "load_spec": "core.spec",
    "LoadedModel": "frontend.model", "load_model": "frontend.model",
    "cross_check": "frontend.onnx_import", "import_onnx": "frontend.onnx_import",
    "BuildOptions": "pipeline.runner", "BuildResult": "pipeline.runner",
}

__getattr__, __dir__, __all__ = lazy_exports(__name__, _PUBLIC, globals())

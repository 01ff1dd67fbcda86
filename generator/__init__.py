"""mi_certify.generator: ONNX import, spec parsing, LUT, emitters, build pipeline, CLI.

The public names below are loaded on first use (PEP 562), so importing one module of
the package (``mi_certify.generator.ir``, say) loads that module and its own imports
only, never the pipeline on top of everything (docs/architecture.md).
"""

from importlib import import_module

_PUBLIC = {
    "BuildError": "errors", "MiCertifyError": "errors", "ModelImportError": "errors",
    "ModelMismatchError": "errors", "SpecError": "errors", "ToolMissingError": "errors",
    "ControllerIR": "ir", "Spec": "spec", "load_spec": "spec",
    "LoadedModel": "model", "load_model": "model",
    "cross_check": "onnx_import", "import_onnx": "onnx_import",
    "BuildOptions": "pipeline", "BuildResult": "pipeline", "build": "pipeline",
}

__all__ = sorted(_PUBLIC)


def __getattr__(name: str):
    if name not in _PUBLIC:
        raise AttributeError(f"module 'mi_certify.generator' has no attribute {name!r}")
    value = getattr(import_module(f".{_PUBLIC[name]}", __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return __all__

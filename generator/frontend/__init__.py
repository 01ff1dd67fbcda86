"""Import layer: ONNX import into the checked IR, the loaded model, the MLP trainer (docs/architecture.md)."""

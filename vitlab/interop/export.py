"""Export lives in `vitlab.runtime.export` (every family, ONNX / OpenVINO / ExportedProgram); these names stay
importable from here."""

from ..runtime.export import FORMATS, export_model

__all__ = ["FORMATS", "export_model"]

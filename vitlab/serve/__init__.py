"""`vitlab serve`: trained runs as an HTTP API (FastAPI) and a page in the browser (Gradio), thin layers over the
prediction functions the command line uses. Needs the serve extra: pip install "vitlab[serve]"."""

from .runs import ServedRun, load_runs, predict
from .uploads import BadInput, ImageLimits

__all__ = ["BadInput", "ImageLimits", "ServedRun", "load_runs", "predict"]

"""vitlab: the Vision Transformer family in PyTorch, built from one small set of readable blocks."""

from .interop import load_weights, save_weights
from .models import create_model, get_config, list_models

__version__ = "0.1.0"

__all__ = ["__version__", "create_model", "get_config", "list_models", "load_weights", "save_weights"]

"""Reading and writing weights, in vitlab's format and those of other libraries (timm, Hugging Face, JAX .npz)."""

from ..checkpoint import CheckpointMismatchError, load_model, read_state_dict, save_weights
from .convert import convert, model_from_checkpoint
from .formats import CheckpointInfo, load_weights, read_checkpoint

__all__ = [
    "CheckpointInfo",
    "CheckpointMismatchError",
    "convert",
    "load_model",
    "load_weights",
    "model_from_checkpoint",
    "read_checkpoint",
    "read_state_dict",
    "save_weights",
]

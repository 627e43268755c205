"""Reading and writing weights, in vitlab's format and those of other libraries."""

from .weights import CheckpointMismatchError, load_model, load_weights, read_state_dict, save_weights

__all__ = ["CheckpointMismatchError", "load_model", "load_weights", "read_state_dict", "save_weights"]

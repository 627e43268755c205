from .deit import DistilledOutput
from .registry import (
    config_from_dict,
    config_to_dict,
    create_model,
    get_config,
    list_models,
    list_pretrained,
    register_model,
)
from .seq2seq import Seq2SeqConfig, Seq2SeqTransformer
from .vit import VisionTransformer, ViTConfig

__all__ = [
    "DistilledOutput",
    "Seq2SeqConfig",
    "Seq2SeqTransformer",
    "ViTConfig",
    "VisionTransformer",
    "config_from_dict",
    "config_to_dict",
    "create_model",
    "get_config",
    "list_models",
    "list_pretrained",
    "register_model",
]

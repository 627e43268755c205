from .registry import config_from_dict, config_to_dict, create_model, get_config, list_models, register_model
from .vit import VisionTransformer, ViTConfig

__all__ = [
    "ViTConfig",
    "VisionTransformer",
    "config_from_dict",
    "config_to_dict",
    "create_model",
    "get_config",
    "list_models",
    "register_model",
]

"""Repos in the real formats, written by the reference libraries' own writers, published into a LocalHub.

The models are whatever the test makes (random weights; tiny configurations keep it fast); what is published is
exactly what the library writes for the Hub, so a test that reads it back checks the format, not a copy of it.
Each returns the commit's sha; `hub.file(repo_id, name)` gives the bytes published.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from .hub_server import LocalHub


def publish_timm(hub: LocalHub, repo_id: str, model_name: str, *, branch: str = "main",
                 model_config: dict[str, Any] | None = None, **kwargs: Any) -> str:
    """A timm model `model_name` (made with `kwargs`, random weights) as timm pushes it to the Hub: `save_for_hf`'s
    config.json (architecture, the model_args that rebuild it, pretrained_cfg, and `model_config`'s keys, such as
    label_names) and model.safetensors."""
    import timm
    from timm.models import save_for_hf

    model = timm.create_model(model_name, pretrained=False, **kwargs)
    with tempfile.TemporaryDirectory() as folder:
        # push_to_hf_hub also writes a README (a model card) and, by default, pytorch_model.bin beside the
        # safetensors file; the loader reads neither when model.safetensors is there
        save_for_hf(model, folder, model_config=model_config, safe_serialization=True)
        return hub.publish_folder(repo_id, folder, branch, message=f"Add {model_name}")


def publish_transformers(hub: LocalHub, repo_id: str, model: Any, *, branch: str = "main", processor: Any = None
                         ) -> str:
    """A transformers model as `save_pretrained` writes it (config.json, model.safetensors), with its image
    processor's preprocessor_config.json where one is given."""
    with tempfile.TemporaryDirectory() as folder:
        model.save_pretrained(folder)
        if processor is not None:
            processor.save_pretrained(folder)
        return hub.publish_folder(repo_id, folder, branch, message=f"Add {type(model).__name__}")


def publish_diffusers(hub: LocalHub, repo_id: str, model: Any, subfolder: str | None = None, *,
                      branch: str = "main") -> str:
    """A diffusers model as `save_pretrained` writes it (config.json, diffusion_pytorch_model.safetensors), at the
    repo's root or in `subfolder` (a pipeline's component: publish each in turn, the files add up)."""
    with tempfile.TemporaryDirectory() as folder:
        model.save_pretrained(Path(folder) / (subfolder or ""))
        return hub.publish_folder(repo_id, folder, branch, message=f"Add {type(model).__name__}")

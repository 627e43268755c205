"""Image generation, VQGAN's two stages (Esser et al. 2021): `--task vqgan` trains the autoencoder with its
codebook and discriminator, `--task prior` a transformer over its codes."""

from .config import PriorTaskConfig, VQGANTaskConfig
from .prior_task import PriorTask
from .vqgan_task import VQGANTask

__all__ = ["PriorTask", "PriorTaskConfig", "VQGANTask", "VQGANTaskConfig"]

"""Image generation, VQGAN's two stages (Esser et al. 2021): `--task vqgan` trains the autoencoder with its
codebook and discriminator, `--task prior` a transformer over its codes."""

from .config import PriorTaskConfig, VQGANTaskConfig

# isort: off
# the VQGAN registers before the prior, which trains on its runs
from .vqgan_task import VQGANTask
from .prior_task import PriorTask
# isort: on

__all__ = ["PriorTask", "PriorTaskConfig", "VQGANTask", "VQGANTaskConfig"]

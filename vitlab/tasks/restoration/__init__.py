"""Image restoration (IPT): super-resolution, denoising and deraining of photographs; metrics as IPT reports them."""

from .config import RestorationConfig
from .task import RestorationTask

__all__ = ["RestorationConfig", "RestorationTask"]

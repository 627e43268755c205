from .config import MIMConfig
from .task import MIMTask

__all__ = ["MIMConfig", "MIMTask"]

from .config import ClassificationConfig
from .task import ClassificationTask

__all__ = ["ClassificationConfig", "ClassificationTask"]

from .config import DetectionConfig
from .task import DetectionTask

__all__ = ["DetectionConfig", "DetectionTask"]

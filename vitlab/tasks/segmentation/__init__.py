from .config import SegmentationConfig
from .task import SegmentationTask

__all__ = ["SegmentationConfig", "SegmentationTask"]

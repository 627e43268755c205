"""Data sets, loading and augmentation for vitlab.

- :func:`build_datasets`: ``"fashion-mnist"`` or an image folder -> train/test datasets plus metadata.
- Fashion-MNIST: :func:`find_fashion_mnist`, :func:`load_fashion_mnist`, :class:`FashionMNIST`.
- Image folders: :class:`ImageFolderDataset`, :func:`split_dataset`.
- Transforms: per-sample pipelines (:func:`build_train_transform`, :func:`build_eval_transform`) and batched
  tensor augmentation (:func:`random_shift_crop_flip`, :func:`normalize_batch`).
- IDX files: :func:`read_idx`, :func:`write_idx`.
"""

from vitlab.data.download import ChecksumError, DownloadError, download_file, md5_of_file, sha256_of_file
from vitlab.data.fashion_mnist import (
    FASHION_MNIST_CLASSES,
    FASHION_MNIST_FILES,
    FASHION_MNIST_MEAN,
    FASHION_MNIST_STD,
    FASHION_MNIST_URL,
    FashionMNIST,
    find_fashion_mnist,
    load_fashion_mnist,
)
from vitlab.data.folder import IMAGE_EXTENSIONS, BadImageError, ImageFolderDataset, load_image
from vitlab.data.idx import read_idx, write_idx
from vitlab.data.registry import DatasetBundle, build_datasets
from vitlab.data.split import split_dataset, split_indices
from vitlab.data.stats import image_folder_stats
from vitlab.data.transforms import (
    ToChannels,
    build_eval_transform,
    build_train_transform,
    normalize_batch,
    random_shift_crop_flip,
)

__all__ = [
    "FASHION_MNIST_CLASSES",
    "FASHION_MNIST_FILES",
    "FASHION_MNIST_MEAN",
    "FASHION_MNIST_STD",
    "FASHION_MNIST_URL",
    "IMAGE_EXTENSIONS",
    "BadImageError",
    "ChecksumError",
    "DatasetBundle",
    "DownloadError",
    "FashionMNIST",
    "ImageFolderDataset",
    "ToChannels",
    "build_datasets",
    "build_eval_transform",
    "build_train_transform",
    "download_file",
    "find_fashion_mnist",
    "image_folder_stats",
    "load_fashion_mnist",
    "load_image",
    "md5_of_file",
    "normalize_batch",
    "random_shift_crop_flip",
    "read_idx",
    "sha256_of_file",
    "split_dataset",
    "split_indices",
    "write_idx",
]

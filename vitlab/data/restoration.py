"""Restoration data: clean photographs, degraded on the fly (data/degradations.py).

    images = load_photos(photo_paths("train"), halve=True)          # uint8 (3, H, W) each
    train = RestorationPatches(images, ("sr2", "denoise30"), patch=48, per_task=4000)
    lq, hq, task = train[i]     # lq (3, 48, 48), hq (3, 48·s, 48·s) float in [0, 1]; task: index into degradations
    batches = TaskBatchSampler(train, batch_size=8)                 # every batch one task, the tasks in turn

    test = RestorationPairs(images, "sr2", crop=256, seed=0)       # whole test photographs' centres, degraded
                                                                   # reproducibly: (lq, hq, name)

A folder of the user's images reads the same way: `image_files(DIR)` for an HR folder (DIV2K, Set5, Set14, BSD68,
Urban100), and with an LR folder beside it (`LR_bicubic/X2/0001x2.png` next to `HR/0001.png`, or the same stems)
`paired_files(hr, lr, scale)` pairs each HR image with its given LR one instead of downscaling it here.

Photographs are halved first by default (PIL bicubic, antialiased): the wallpapers are 1–20 megapixel JPEGs, and
halving washes out their compression and demosaicing artefacts, so the clean targets are clean.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset, Sampler

from .degradations import check_degradation, degrade, generator_for, scale_of
from .folder import IMAGE_EXTENSIONS
from .images import BadImageError, read_image, warn_skipped


def to_tensor(image: Image.Image | np.ndarray) -> torch.Tensor:
    """A PIL image or (H, W, 3) array -> (3, H, W) uint8, RGB (grey and RGBA converted)."""
    if isinstance(image, np.ndarray):
        image = Image.fromarray(image)
    array = np.asarray(image.convert("RGB"))
    return torch.from_numpy(array.copy()).permute(2, 0, 1).contiguous()


def halve(image: torch.Tensor) -> torch.Tensor:
    """(3, H, W) uint8 -> (3, H // 2, W // 2), PIL's antialiased bicubic."""
    H, W = image.shape[-2:]
    pil = Image.fromarray(image.permute(1, 2, 0).numpy())
    return to_tensor(pil.resize((W // 2, H // 2), Image.BICUBIC))


def load_photos(paths: Sequence[str | Path], halve_first: bool = True) -> list[torch.Tensor]:
    """Each file read by the one image reader (EXIF orientation applied, RGB) as (3, H, W) uint8, halved first if
    asked. A file that cannot be read raises BadImageError, naming it."""
    return read_photos(paths, halve_first)[1]


def read_photos(paths: Sequence[str | Path], halve_first: bool = True, skip_bad_images: bool = False
                ) -> tuple[list[Path], list[torch.Tensor]]:
    """(the files read, their images) as `load_photos`; with `skip_bad_images` the unreadable files are left out
    with a warning that counts them, instead of stopping."""
    kept, images, bad = [], [], []
    for path in paths:
        try:
            image = to_tensor(read_image(path, 3))
        except BadImageError:
            if not skip_bad_images:
                raise
            bad.append(str(path))
            continue
        kept.append(Path(path))
        images.append(halve(image) if halve_first else image)
    warn_skipped(f"{Path(paths[0]).parent if paths else 'photographs'}", {"unreadable images": bad})
    return kept, images


def image_files(folder: str | Path) -> list[Path]:
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"no image folder at {folder}")
    files = sorted(p for p in folder.iterdir() if p.suffix.lower() in IMAGE_EXTENSIONS)
    if not files:
        raise FileNotFoundError(f"{folder} holds no images ({', '.join(sorted(IMAGE_EXTENSIONS))})")
    return files


def paired_files(hr_folder: str | Path, lr_folder: str | Path, scale: int) -> list[tuple[Path, Path]]:
    """(HR, LR) pairs by stem: `0001.png` with `0001.png` or `0001x2.png` (DIV2K's and Set5's LR names)."""
    lr_by_stem = {re.sub(rf"x{scale}$", "", p.stem): p for p in image_files(lr_folder)}
    pairs, missing = [], []
    for hr in image_files(hr_folder):
        lr = lr_by_stem.get(hr.stem)
        if lr is None:
            missing.append(hr.name)
        else:
            pairs.append((hr, lr))
    if missing:
        raise FileNotFoundError(f"{len(missing)} HR images have no LR image in {lr_folder} (by stem, with or without "
                                f"'x{scale}'): {', '.join(missing[:5])}")
    return pairs


def random_crop(image: torch.Tensor, size: int, generator: torch.Generator | None = None) -> torch.Tensor:
    H, W = image.shape[-2:]
    if min(H, W) < size:
        raise ValueError(f"an image of {H}×{W} is smaller than the {size}-pixel training crop")
    y = int(torch.randint(0, H - size + 1, (), generator=generator))
    x = int(torch.randint(0, W - size + 1, (), generator=generator))
    return image[:, y:y + size, x:x + size]


def augment(lq: torch.Tensor, hq: torch.Tensor, generator: torch.Generator | None = None
            ) -> tuple[torch.Tensor, torch.Tensor]:
    """The same random flip and 90° rotation of input and target (the EDSR/IPT augmentation)."""
    if torch.rand((), generator=generator) < 0.5:
        lq, hq = lq.flip(-1), hq.flip(-1)
    k = int(torch.randint(0, 4, (), generator=generator))
    return lq.rot90(k, (-2, -1)), hq.rot90(k, (-2, -1))


class RestorationPatches(Dataset):
    """Training patches: `per_task` items for each degradation; item i belongs to degradation i // per_task. Each
    is a fresh random crop of a random photograph (patch · scale pixels), degraded, flipped and rotated. Returns
    (lq (3, patch, patch), hq (3, patch·s, patch·s) float in [0, 1], task index[, photograph index])."""

    def __init__(self, images: Sequence[torch.Tensor], degradations: Sequence[str], patch: int = 48,
                 per_task: int = 1000, with_source: bool = False) -> None:
        for name in degradations:
            check_degradation(name)
        if not images:
            raise ValueError("no training photographs")
        self.images, self.degradations, self.patch, self.per_task = list(images), tuple(degradations), patch, per_task
        self.with_source = with_source  # items end with the photograph's index (the contrastive term's label)

    def __len__(self) -> int:
        return len(self.degradations) * self.per_task

    def task_of(self, index: int) -> int:
        return index // self.per_task

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor, int]:
        task = self.task_of(index)
        name = self.degradations[task]
        scale = scale_of(name)
        source = int(torch.randint(0, len(self.images), ()))
        clean = random_crop(self.images[source], self.patch * scale)
        lq, hq = degrade(clean, name, torch.default_generator)
        lq, hq = augment(lq, hq)
        if self.with_source:
            return lq.float() / 255, hq.float() / 255, task, source
        return lq.float() / 255, hq.float() / 255, task


class TaskBatchSampler(Sampler[list[int]]):
    """Batches of one task each, the tasks in turn (task 0, 1, …, 0, 1, …), each task's items shuffled: IPT's
    multi-task training, where a step takes one task's batch through its head and tail. `rank`/`world_size` give
    each process every world_size-th batch."""

    def __init__(self, dataset: RestorationPatches, batch_size: int, seed: int = 0, rank: int = 0,
                 world_size: int = 1) -> None:
        self.dataset, self.batch_size, self.seed, self.epoch = dataset, batch_size, seed, 0
        self.rank, self.world_size = rank, world_size

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def batches(self) -> list[list[int]]:
        g = torch.Generator().manual_seed(self.seed * 1000003 + self.epoch)
        per_task, tasks = self.dataset.per_task, len(self.dataset.degradations)
        rounds = per_task // self.batch_size
        orders = [(torch.randperm(per_task, generator=g) + t * per_task).tolist() for t in range(tasks)]
        return [orders[t][r * self.batch_size:(r + 1) * self.batch_size] for r in range(rounds) for t in range(tasks)]

    def __iter__(self) -> Iterator[list[int]]:
        batches = self.batches()
        # every process the same number of batches (a rank that ran out first would stall the others)
        yield from batches[:len(self) * self.world_size][self.rank::self.world_size]

    def __len__(self) -> int:
        return len(self.dataset.degradations) * (self.dataset.per_task // self.batch_size) // self.world_size


class TaskBatchLoader:
    """The loop's epoch loader over TaskBatchSampler's batches: `len()` batches, `set_epoch(epoch)` fixes the
    order, `batches_from(start)` resumes mid-epoch without loading the batches before `start`. A batch is
    (lq (B, 3, p, p), hq (B, 3, p·s, p·s), task (B,)), one task throughout."""

    def __init__(self, dataset: RestorationPatches, batch_size: int, seed: int = 0, rank: int = 0,
                 world_size: int = 1, num_workers: int = 0) -> None:
        if dataset.per_task < batch_size:
            raise ValueError(f"patches_per_task ({dataset.per_task}) must be at least the batch size ({batch_size})")
        self.dataset, self.num_workers, self.seed = dataset, num_workers, seed
        self.sampler = TaskBatchSampler(dataset, batch_size, seed, rank, world_size)

    @property
    def epoch(self) -> int:
        return self.sampler.epoch

    def set_epoch(self, epoch: int) -> None:
        self.sampler.set_epoch(epoch)

    def __len__(self) -> int:
        return len(self.sampler)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, ...]]:
        return self.batches_from(0)

    def batches_from(self, start: int) -> Iterator[tuple[torch.Tensor, ...]]:
        batches = list(self.sampler)[start:]
        # workers' seeds come from (seed, epoch), not from the global RNG
        generator = torch.Generator().manual_seed(self.seed * 1000003 + self.epoch + 1)
        yield from DataLoader(self.dataset, batch_sampler=batches, num_workers=self.num_workers, generator=generator)


def center_crop(image: torch.Tensor, size: int | None) -> torch.Tensor:
    if size is None:
        return image
    H, W = image.shape[-2:]
    h, w = min(H, size), min(W, size)
    y, x = (H - h) // 2, (W - w) // 2
    return image[:, y:y + h, x:x + w]


class RestorationPairs(Dataset):
    """Test pairs from whole photographs: each image's centre (`crop` pixels a side, None for all of it), degraded
    with a generator fixed by (seed, image index, degradation). Returns (lq, hq, name) floats in [0, 1]."""

    def __init__(self, images: Sequence[torch.Tensor], degradation: str, crop: int | None = 256, seed: int = 0,
                 names: Sequence[str] | None = None) -> None:
        check_degradation(degradation)
        self.images, self.degradation, self.crop, self.seed = list(images), degradation, crop, seed
        self.names = list(names) if names else [f"image{i}" for i in range(len(self.images))]

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor, str]:
        clean = center_crop(self.images[index], self.crop)
        lq, hq = degrade(clean, self.degradation, generator_for(self.seed, index, self.degradation))
        return lq.float() / 255, hq.float() / 255, self.names[index]

"""Where a pool's workers run: their devices (GPU) or their shares of the cores (CPU)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Optional, Union

from .. import _cpus, capi
from ..enums import CPU_ARCHS, Arch
from ..errors import ArgumentOutOfRangeError, InvalidArgumentError

Device = Union[int, Sequence[int]]  # a worker's device, or (CUDA) the several devices it holds


def _is_number(d: object) -> bool:
    return isinstance(d, int) and not isinstance(d, bool) and d >= 0


def _checked_counts(workers: int | None, devices: Sequence[Device] | None) -> list[tuple[int, ...]] | None:
    """``devices`` as a list of each worker's devices, after checking it and ``workers`` (InvalidArgumentError)."""
    if workers is not None and (not isinstance(workers, int) or isinstance(workers, bool) or workers < 1):
        raise InvalidArgumentError(f"Pool: workers must be an int >= 1, got {workers!r}")
    if devices is None:
        return None
    out = [(d,) if _is_number(d) else tuple(d) if isinstance(d, (list, tuple)) else () for d in devices]
    if not out or not all(g and all(_is_number(d) for d in g) and len(set(g)) == len(g) for g in out):
        raise InvalidArgumentError(f"Pool: devices must be a non-empty list of device numbers (or, on CUDA, lists of "
                                   f"them: the devices a worker holds), got {devices!r}")
    return out


#: One worker's place: the device (its first, where it holds several) given to it, its runtimes' device indices, its
#: CUDA_VISIBLE_DEVICES (None: the process's own), and every device given to it (empty where Ray gives them).
Placed = tuple[Optional[int], tuple[int, ...], Optional[str], tuple[int, ...]]


def plan_devices(arch: Arch, devices: Sequence[Device] | None, workers: int | None, backend: str,
                 cuda_visible: bool = True) -> list[Placed]:
    """Each worker's place. On CUDA a worker sees only its GPUs (``cuda_visible``: CUDA_VISIBLE_DEVICES set, so its
    first GPU is device 0 there, as torch's "cuda" is), or every GPU, its runtimes taking theirs by index."""
    groups = _checked_counts(workers, devices)
    if arch in CPU_ARCHS:
        return []  # how many workers, and their cores: plan_cpus
    status = capi.arch_status()[arch]
    if groups is None:
        groups = [(d,) for d in _every_device(arch, status)]
    if arch != Arch.CUDA and any(len(g) > 1 for g in groups):
        raise InvalidArgumentError(f"Pool: a worker holds several devices on CUDA only, not {arch.name}")
    if backend == "local":
        _check_exist(arch, status, groups)
    return [_place(arch, groups[i % len(groups)], backend, cuda_visible) for i in range(workers or len(groups))]


def _check_exist(arch: Arch, status: capi.ArchStatus, groups: list[tuple[int, ...]]) -> None:
    """ArgumentOutOfRangeError for a device of ``groups`` that this machine does not have."""
    known = len(status.devices) if arch == Arch.VULKAN and status.devices else status.device_count
    for d in (d for g in groups for d in g):
        if known is not None and d >= known:
            raise ArgumentOutOfRangeError(f"Pool: device {d} does not exist: {arch.name.lower()} has {known} "
                                          f"device(s) here")


def _place(arch: Arch, group: tuple[int, ...], backend: str, cuda_visible: bool) -> Placed:
    """The place of a worker given the devices ``group``."""
    if arch != Arch.CUDA:
        return group[0], group, None, group
    if backend == "ray":  # Ray gives each CUDA actor its GPUs (num_gpus) and sets the variable
        return None, tuple(range(len(group))), None, ()
    if cuda_visible:
        return group[0], tuple(range(len(group))), ",".join(_visible(d) for d in group), group
    return group[0], group, None, group  # every GPU seen: each runtime on its device by index (the own runtime's)


def _every_device(arch: Arch, status: capi.ArchStatus) -> list[int]:
    """The devices a pool takes by default: every one of ``arch``'s (on Vulkan the hardware ones, where any)."""
    if arch == Arch.VULKAN and status.devices:
        hardware = [i for i, d in enumerate(status.devices) if not d.software]
        return hardware or [0]
    return list(range(status.device_count or 1))


def plan_cpus(workers: int | None, threads: int | None,
              backend: str) -> tuple[int, list[tuple[int, ...] | None]]:
    """``(threads of each worker's runtime, the cores of each worker)`` on the CPU: the usable cores divided
    among the workers, each local worker pinned to its own share, one hardware thread of every physical core taken
    before any second one (Ray places its own)."""
    cores = _cpus.spread(_cpus.affinity())[:_cpus.usable_cpus()]  # physical cores first; within a quota: as many
    # cores as it allows
    cores = cores[1:] + cores[:1]  # the first core (where the system and the pool's own process run most) last
    if threads is not None:
        threads = _cpus.check_threads(threads, "Pool: threads")
        count = workers or max(1, len(cores) // threads)
    else:
        count = workers or len(cores)
        threads = max(1, len(cores) // count)
    if backend == "ray":
        return threads, [None] * count
    # more workers or threads than cores: the shares wrap around and overlap
    return threads, [tuple(cores[(i * threads + j) % len(cores)] for j in range(threads)) for i in range(count)]


def _visible(device: int) -> str:
    """CUDA_VISIBLE_DEVICES for a worker given ``device``, counted among the devices this process sees."""
    seen = os.environ.get("CUDA_VISIBLE_DEVICES")
    if seen is None:
        return str(device)
    visible = [v.strip() for v in seen.split(",") if v.strip()]
    if device >= len(visible):
        raise ArgumentOutOfRangeError(f"Pool: device {device} does not exist: CUDA_VISIBLE_DEVICES={seen!r}")
    return visible[device]

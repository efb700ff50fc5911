"""Where a pool's workers run: their devices (GPU) or their shares of the cores (CPU)."""

from __future__ import annotations

import os
from collections.abc import Sequence

from .. import _cpus, capi
from ..enums import CPU_ARCHS, Arch
from ..errors import ArgumentOutOfRangeError, InvalidArgumentError


def _checked_counts(workers: int | None, devices: Sequence[int] | None) -> list[int] | None:
    """``devices`` as a list, after checking it and ``workers`` (InvalidArgumentError)."""
    if workers is not None and (not isinstance(workers, int) or isinstance(workers, bool) or workers < 1):
        raise InvalidArgumentError(f"Pool: workers must be an int >= 1, got {workers!r}")
    if devices is None:
        return None
    devices = list(devices)
    if not devices or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in devices):
        raise InvalidArgumentError(f"Pool: devices must be a non-empty list of device numbers, got {devices!r}")
    return devices


def plan_devices(arch: Arch, devices: Sequence[int] | None, workers: int | None,
                 backend: str) -> list[tuple[int | None, int, str | None]]:
    """``(device, runtime device_index, CUDA_VISIBLE_DEVICES)`` for each worker."""
    devices = _checked_counts(workers, devices)
    if arch in CPU_ARCHS:
        return []  # how many workers, and their cores: plan_cpus
    status = capi.arch_status()[arch]
    if devices is None:
        devices = _every_device(arch, status)
    known = len(status.devices) if arch == Arch.VULKAN and status.devices else status.device_count
    if backend == "local" and known is not None:
        for d in devices:
            if d >= known:
                raise ArgumentOutOfRangeError(f"Pool: device {d} does not exist: {arch.name.lower()} has {known} "
                                              f"device(s) here")
    count = workers or len(devices)
    plan: list[tuple[int | None, int, str | None]] = []
    for i in range(count):
        device = devices[i % len(devices)]
        if arch == Arch.CUDA:
            if backend == "ray":  # Ray gives each CUDA actor its GPU (num_gpus=1) and sets the variable
                plan.append((None, 0, None))
            else:
                plan.append((device, 0, _visible(device)))
        else:
            plan.append((device, device, None))
    return plan


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

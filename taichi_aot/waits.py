"""How a runtime waits for its device: ``Runtime(wait=...)``, else ``TAICHI_AOT_WAIT``, else ``"auto"``.

The policies are CUDA's scheduling flags' (``cudaDeviceScheduleAuto``, ``Spin``, ``Yield``, ``BlockingSync``):

* ``"auto"``: poll for a bounded time, learned from how long the runtime's waits took (twice their recent length,
  at least 50 us, at most about a millisecond), and only while fewer threads of the process poll than it has cores;
  then sleep in the driver's wait; on a CPU device (Vulkan's lavapipe) it sleeps at once, as the device's own
  threads need the cores a poll would take, and so it does where threads share a Vulkan runtime (from a launch of
  one thread after another's until one thread has made 64 launches in a row): a polling thread slows the one
  launching;
* ``"spin"``: poll until the work is done (the lowest latency; a core busy for the whole wait);
* ``"yield"``: poll, yielding the core between polls;
* ``"block"``: sleep in the driver's wait at once (the least CPU time; on NVIDIA's Vulkan it wakes 20-30 us after
  the GPU is done).

The own Vulkan launch's fence waits follow the policy (``rt.device.counts()``: ``waits polled``, ``waits blocked``,
``waits while threads share``).
"""

from __future__ import annotations

import os

from .errors import InvalidArgumentError

__all__ = ["POLICIES", "resolve_wait"]

#: The wait policies, in the order of their C codes (TAICHI_AOT_WAIT_AUTO, _SPIN, _YIELD, _BLOCK).
POLICIES = ("auto", "spin", "yield", "block")


def resolve_wait(wait: str | None) -> str:
    """The policy ``wait`` names (None: ``TAICHI_AOT_WAIT``, else ``"auto"``); InvalidArgumentError for another."""
    source = "wait"
    if wait is None:
        wait, source = os.environ.get("TAICHI_AOT_WAIT", "").strip() or "auto", "TAICHI_AOT_WAIT"
    if not isinstance(wait, str) or wait.strip().lower() not in POLICIES:
        raise InvalidArgumentError(f"{source}={wait!r}: expected one of {', '.join(map(repr, POLICIES))}")
    return wait.strip().lower()

"""The caller's host arrays whose pages a device keeps pinned for its copies: the one policy of both drivers' host
transfers, given each driver's pin and unpin (:class:`HostPages`). CUDA's transfers page-lock arrays
(``drivers.cuda_host``: ``cuMemHostRegister``, one set for the process); a Vulkan runtime imports them
(``placement/vkhost.py``: VK_EXT_external_memory_host, a set a runtime).

* What is pinned is the whole allocation of the array that owns the memory (``base`` followed to its end), and only
  where numpy owns it, so its lifetime is that array's.
* An array seen once is remembered, weakly (the least recent forgotten past ``seen_max``); the second sight pins it,
  within the budget (:func:`register_limit`). Where the set evicts (CUDA's), the least recently used pins no copy is
  using are let go first to make room.
* A pin is kept until its array is collected (the weak reference's callback unpins it before numpy frees the
  memory), or until its memory is found moved (``resize``, ``__setstate__``): let go as the array comes by, or as
  another array is pinned.
* A pin the driver refused is not tried again while that array lives.
* A copy holds its pin between :meth:`HostPages.take` and :meth:`HostPages.done`: no other thread lets it go
  meanwhile.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections import OrderedDict
from typing import Any, Callable

import numpy as np

from .errors import InvalidArgumentError

__all__ = ["HostPages", "Pin", "register_limit"]

#: The budget, once read (:func:`register_limit`); tests set it.
REGISTER_LIMIT: int | None = None


def register_limit() -> int:
    """The most bytes of the caller's arrays one set pins at once: ``TAICHI_AOT_REGISTER_LIMIT`` (bytes, or with a
    K, M or G suffix; 0 turns pinning off), else a quarter of the memory the process may use (the physical memory,
    or its cgroup's limit where lower). Read once."""
    global REGISTER_LIMIT
    if REGISTER_LIMIT is None:
        raw = os.environ.get("TAICHI_AOT_REGISTER_LIMIT", "")
        REGISTER_LIMIT = _parse_bytes(raw) if raw.strip() else _usable_memory() // 4
    return REGISTER_LIMIT


def _parse_bytes(raw: str) -> int:
    text = raw.strip().upper().removesuffix("B").removesuffix("I")
    shift = {"K": 10, "M": 20, "G": 30, "T": 40}.get(text[-1:], 0)
    try:
        value = float(text[:-1] if shift else text) * (1 << shift)
        if not 0 <= value < 1 << 62:  # negative, infinite or NaN
            raise ValueError(raw)
        return int(value)
    except (ValueError, OverflowError):
        raise InvalidArgumentError(f"TAICHI_AOT_REGISTER_LIMIT: expected a size such as 4G, 512M or 0 (off), "
                                   f"got {raw!r}") from None


def _usable_memory() -> int:
    try:
        total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):  # pragma: no cover - not Linux
        total = 16 << 30
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            with open(path) as f:
                text = f.read().strip()
        except OSError:
            continue
        if text.isdigit():
            total = min(total, int(text))
    return total


def _address(a: np.ndarray) -> int:
    return int(a.__array_interface__["data"][0])


class Pin:
    """One array's allocation, pinned: where it starts, its bytes, what the driver's pin gave (``handle``: the
    device's unpin takes the Pin), and how many copies use it (``busy``)."""

    __slots__ = ("busy", "handle", "key", "ref", "size", "start")

    def __init__(self, owner: np.ndarray, collected: Callable[[Pin], object]):
        self.key, self.start, self.size, self.busy = id(owner), _address(owner), owner.nbytes, 0
        self.handle: Any = None
        self.ref: weakref.ref[np.ndarray] | None = weakref.ref(owner, lambda _: collected(self))

    def holds(self, root: np.ndarray, host: int, nbytes: int) -> bool:
        """Whether this pin holds the memory ``root`` owns now, ``host`` to ``host + nbytes`` in it (cheap checks, made
        each copy: memory that moved is told by ``host``, the address of the array copied, which lies in it)."""
        return (self.ref is not None and self.ref() is root and root.base is None and bool(root.flags.owndata)
                and root.nbytes == self.size and self.start <= host and host + nbytes <= self.start + self.size)


class HostPages:
    """A set of pinned arrays (the module docstring), pinned by ``pin(start, size)`` (what the driver gave, or None
    where it refused) and let go by ``unpin(pin)``; ``seen_max`` arrays seen once remembered; ``evict``: let the
    least recently used pins go for a new one where the budget needs."""

    def __init__(self, pin: Callable[[int, int], Any], unpin: Callable[[Pin], object], *, seen_max: int,
                 evict: bool):
        self._pin, self._unpin, self._seen_max, self._evict = pin, unpin, seen_max, evict
        self._pins: OrderedDict[int, Pin] = OrderedDict()  # by id() of the owning array, least recent first
        self._seen: OrderedDict[int, tuple[weakref.ref[np.ndarray], bool]] = OrderedDict()  # id -> array, refused
        self._bytes = 0
        self.lock = threading.RLock()  # reentrant: a collected array's callback may run inside a section

    def take(self, array: np.ndarray, host: int, nbytes: int) -> Pin | None:
        """The pin of ``array``'s memory (``host``, ``nbytes``: the part a copy moves), held for one copy (the
        caller gives it back: :meth:`done`), made where this is the array's second sight; None: copy otherwise."""
        root = array
        while isinstance(root.base, np.ndarray):
            root = root.base
        key = id(root)
        if root.base is not None and key not in self._pins:  # memory numpy does not own: nothing to do, no lock
            return None
        with self.lock:
            pin = self._pins.get(key)
            if pin is not None:
                if pin.holds(root, host, nbytes):
                    self._pins.move_to_end(key)
                    pin.busy += 1
                    return pin
                if pin.busy:  # in use by another thread's copy: left to it
                    return None
                self._let_go(pin)  # a dead array's successor at the same id(), or memory that moved
            if not self._pinnable(root) or not self._seen_before(key, root):
                return None
            made = self._make(root)
            if not isinstance(made, Pin):  # over the budget: tried again; the driver refused: not again
                self._seen[key] = (weakref.ref(root), made == "refused")
                return None
            made.busy += 1
            return made

    def done(self, pin: Pin) -> None:
        """A copy through ``pin`` is over."""
        with self.lock:
            pin.busy -= 1

    def kept_bytes(self) -> int:
        """The bytes pinned now."""
        return self._bytes

    def forget_all(self) -> None:
        """Drop every pin without unpinning (a forked child: the parent's pins are not its own); a fresh lock."""
        for pin in self._pins.values():
            pin.ref = None
        self._pins.clear()
        self._seen.clear()
        self._bytes = 0
        self.lock = threading.RLock()

    @staticmethod
    def _pinnable(root: np.ndarray) -> bool:
        """Whether numpy allocated ``root``'s memory (its lifetime is the array's), contiguous, within the budget."""
        return (root.base is None and bool(root.flags.owndata) and root.nbytes <= register_limit()
                and bool(root.flags.c_contiguous or root.flags.f_contiguous))

    def _seen_before(self, key: int, root: np.ndarray) -> bool:
        """Whether ``root`` (at ``id()`` ``key``) was seen before and not refused; else it is remembered now."""
        seen = self._seen.pop(key, None)  # id() may name a dead array's successor: the weak reference tells
        if seen is not None and seen[0]() is root and not seen[1]:
            return True
        self._seen[key] = (weakref.ref(root), seen is not None and seen[0]() is root and seen[1])
        while len(self._seen) > self._seen_max:
            self._seen.popitem(last=False)
        return False

    def _make(self, owner: np.ndarray) -> Pin | str:
        """Pin ``owner``'s memory (under the lock), letting go first of pins whose memory moved while no copy used
        them, and where the set evicts, of the least recently used as far as the budget needs; else "over budget"
        or "refused" (by the driver)."""
        limit, size = register_limit(), owner.nbytes
        for p in list(self._pins.values()):
            target = p.ref() if p.ref is not None else None
            if not p.busy and (target is None or _address(target) != p.start):
                self._let_go(p)
        for p in list(self._pins.values()) if self._evict else ():
            if self._bytes + size <= limit:
                break
            if not p.busy:
                self._let_go(p)
        if self._bytes + size > limit:
            return "over budget"
        # tracked before the driver pins it: an interruption leaves a range tracked (and let go when its array goes),
        # never a pinned range nobody lets go
        pin = Pin(owner, self._collected)
        self._pins[pin.key] = pin
        self._bytes += size
        try:
            pin.handle = self._pin(pin.start, size)
        finally:
            if pin.handle is None:
                pin.ref = None
                del self._pins[pin.key]
                self._bytes -= size
        return pin if pin.handle is not None else "refused"

    def _collected(self, pin: Pin) -> None:
        with self.lock:
            self._let_go(pin)

    def _let_go(self, pin: Pin) -> None:
        """Unpin, then forget (under the lock). In this order an interruption leaves the range tracked (unpinned
        twice at worst, which the drivers refuse harmlessly), never pinned untracked."""
        if pin.ref is None:
            return
        try:
            self._unpin(pin)
        except Exception:  # the driver is gone (interpreter exit)
            pass
        if pin.ref is None:  # forgotten meanwhile (a fork's child, a callback that ran inside this one)
            return
        pin.ref = None
        if self._pins.get(pin.key) is pin:
            del self._pins[pin.key]
        self._bytes -= pin.size

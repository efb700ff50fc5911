"""Ray workers: the same Worker as a Ray actor, so a pool spreads over a cluster with the same code.

A CUDA worker asks Ray for one GPU (``num_gpus=1``) and Ray sets its ``CUDA_VISIBLE_DEVICES``; a CPU
worker asks for as many CPUs as its runtime starts threads (the pool's ``threads``). Workers are spread over
the cluster's nodes (Ray's ``"SPREAD"`` strategy), and each says which node it runs on. Actors are never
restarted by Ray (``max_restarts=0``): the pool replaces a dead actor and retries its task itself, exactly as
it does for local processes; a handle tells an actor that died from one whose node left the cluster.
"""

from __future__ import annotations

from typing import Any, Callable

from ..errors import WorkerStartError, WorkerTaskError
from ._worker import (
    Reply,
    Started,
    StartFailed,
    TaskFailed,
    WorkerConfig,
    WorkerDiedError,
    run_task,
    start_error,
    start_worker,
)

_actor_class: Any = None


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise WorkerStartError("backend='ray' needs Ray: pip install 'taichi_aot[ray]'") from None
    return ray


class _PoolActor:
    """The actor's body (wrapped by ``ray.remote`` on first use, so importing this file needs no Ray)."""

    def __init__(self, config: WorkerConfig):
        self.worker, self.hello_reply = start_worker(config)
        if isinstance(self.hello_reply, Started):
            self.hello_reply.info["node"] = _ray().get_runtime_context().get_node_id()

    def hello(self) -> Started | StartFailed:
        return self.hello_reply

    def run(self, fn: Callable[..., Any], item: Any) -> Reply:
        return run_task(self.worker, fn, item) if self.worker is not None else TaskFailed(None, "", "not started", "")

    def stop(self) -> None:
        if self.worker is not None:
            self.worker.close()
            self.worker = None


def _actor() -> Any:
    global _actor_class
    if _actor_class is None:
        _actor_class = _ray().remote(max_restarts=0, max_task_retries=0)(_PoolActor)
    return _actor_class


class RayHandle:
    """One worker as a Ray actor."""

    backend = "ray"

    def __init__(self, config: WorkerConfig, cuda: bool):
        ray = _ray()
        if not ray.is_initialized():
            raise WorkerStartError("backend='ray': Ray is not initialized (the pool calls ray.init() when given "
                                   "ray_init=True, the default)")
        self.config = config
        # a CPU worker reserves the threads its runtime starts (Ray places it; the pool pins nothing there)
        # (at most what one node has: an actor asking for more would never start)
        cpus = min(config.threads or 1,
                   int(max((n.get("Resources", {}).get("CPU", 1) for n in ray.nodes()), default=1)))
        gpus = 1 + len(config.more_devices)  # the GPUs it holds
        resources: dict[str, Any] = {"num_gpus": gpus, "num_cpus": 0} if cuda else {"num_cpus": max(cpus, 1)}
        options: dict[str, Any] = dict(resources, scheduling_strategy="SPREAD")  # over the nodes, not packed
        if config.env:  # set before the actor's process imports anything (the library reads some at import)
            options["runtime_env"] = {"env_vars": dict(config.env)}
        self.actor = _actor().options(**options).remote(config)
        self.pid: int | None = None
        self.info: dict[str, Any] = {}

    def ready(self, timeout: float | None) -> None:
        ray = _ray()
        try:
            reply = ray.get(self.actor.hello.remote(), timeout=timeout)
        except ray.exceptions.GetTimeoutError:
            self.kill()
            raise TimeoutError(f"worker {self.config.slot} (a Ray actor) did not start within {timeout:g} s "
                               "(are the resources it asks for, a GPU for CUDA, in the cluster?)") from None
        except ray.exceptions.RayError as e:
            raise WorkerStartError(f"worker {self.config.slot} (a Ray actor) died while starting: {e}") from None
        if not isinstance(reply, Started):
            self.kill()
            raise start_error(self.config.slot, reply)
        self.info = reply.info
        self.pid = self.info["pid"]

    def run(self, fn: Callable[..., Any], item: Any) -> Reply:
        ray = _ray()
        try:
            return ray.get(self.actor.run.remote(fn, item))
        except ray.exceptions.RayActorError:
            raise WorkerDiedError(None, node_lost=self._node_gone()) from None
        except ray.exceptions.RayTaskError as e:  # Ray could not carry the task or its result
            raise WorkerTaskError(f"Ray could not carry the task or its result (cannot be pickled?): "
                                  f"{str(e).strip().splitlines()[-1]}", type(e).__name__) from None

    def _node_gone(self) -> bool:
        """Whether the node this actor ran on has left the cluster (one that leaves in order is marked dead before
        its actors are)."""
        node = self.info.get("node")
        try:
            return node is not None and not any(n["NodeID"] == node and n["Alive"] for n in _ray().nodes())
        except Exception:  # the cluster cannot say: the actor died, nothing more is known
            return False

    def kill(self) -> None:
        try:
            _ray().kill(self.actor, no_restart=True)
        except Exception:  # already gone
            pass

    def stop(self, timeout: float) -> None:
        ray = _ray()
        try:
            ray.get(self.actor.stop.remote(), timeout=timeout)
        except Exception:  # dead or late: killed below either way
            pass
        self.kill()

    def release(self) -> None:
        self.kill()

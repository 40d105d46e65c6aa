"""Which process of a distributed run this is, and the few collective steps ``probes`` needs.

A run launched with ``torchrun --nproc-per-node N -m probes COMMAND ...`` starts N processes
(ranks). Each reads the whole corpus, keeps its own contiguous block of it (:meth:`World.shard`:
rank 0 the first block, rank 1 the next ...; whole documents for coreference and bridging), runs
the model and its analyses on that block only, and then every rank's analysis states are merged
through the analyses' own ``merge`` in rank order (:func:`merge_analyses`). Because the blocks are
contiguous and merged in order, the merged state is the state one process would have reached on
the whole corpus: counts are equal exactly, per-item lists are in input order. Only rank 0 writes
outputs and prints.

One process (no ``torchrun``, or ``WORLD_SIZE=1``) is the world of size 1: every step below is
then the identity, at no cost.

Every collective step (:meth:`World.gather`, :meth:`World.barrier`) names what it waits for, and a failure
in it (a rank that stopped, hung past :func:`timeout` or left the run: torch's ``RuntimeError`` /
``DistBackendError``) becomes one :class:`~probes.errors.DistributedError` line saying so.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

from probes.errors import ConfigError, DistributedError

__all__ = ["World", "init_world", "launched", "merge_analyses", "block_record", "world_record", "timeout",
           "TIMEOUT_ENV", "DEFAULT_TIMEOUT_MIN", "collective", "collective_error"]

T = TypeVar("T")

#: Environment variable: minutes a rank waits in a collective step (gather, barrier) before the run fails.
TIMEOUT_ENV = "PROBES_DIST_TIMEOUT_MIN"
#: Its default, 10 minutes: ranks' blocks are equal in size, so they reach each step within seconds of each
#: other (a model load is before the first step); a stopped or hung rank ends the run after 10 minutes.
DEFAULT_TIMEOUT_MIN = 10.0


@dataclass(frozen=True)
class World:
    """This process' place in a run: ``rank`` of ``size`` processes (``size == 1``: not distributed).

    Attributes:
        rank: 0-based rank of this process (0 writes the outputs).
        size: number of processes (``WORLD_SIZE``).
        local_rank: rank on this machine (``LOCAL_RANK``): the CUDA device index a rank uses.
        backend: ``gloo`` (CPU) or ``nccl`` (CUDA); None when not distributed.
    """

    rank: int = 0
    size: int = 1
    local_rank: int = 0
    backend: str | None = None

    @property
    def distributed(self) -> bool:
        """True when more than one process takes part."""
        return self.size > 1

    @property
    def is_main(self) -> bool:
        """True on rank 0, the only rank that writes outputs and prints."""
        return self.rank == 0

    @classmethod
    def current(cls) -> World:
        """The world of the initialised ``torch.distributed`` process group, else the world of one process."""
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()):
            return cls()
        return cls(dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", "0")),
                   str(dist.get_backend()))

    def shard(self, n: int) -> range:
        """The indices of this rank's contiguous block of ``n`` items (blocks differ in size by at most 1)."""
        return range(n * self.rank // self.size, n * (self.rank + 1) // self.size)

    def take(self, items: Sequence[T]) -> list[T]:
        """This rank's contiguous block of ``items`` (all of them in a world of one)."""
        block = self.shard(len(items))
        return list(items[block.start:block.stop])

    def gather(self, value: Any, step: str = "the exchange of results") -> list[Any]:
        """Every rank's ``value`` (picklable), in rank order, on every rank; ``[value]`` in a world of one.

        ``step`` names what the ranks exchange, for the error when one of them does not take part.
        """
        if not self.distributed:
            return [value]
        import torch.distributed as dist

        out: list[Any] = [None] * self.size
        with collective(step):
            dist.all_gather_object(out, value)
        return out

    def barrier(self, step: str = "a barrier") -> None:
        """Wait until every rank gets to ``step`` (nothing in a world of one)."""
        if self.distributed:
            import torch.distributed as dist

            with collective(step):
                dist.barrier()

    def as_dict(self) -> dict[str, Any]:
        """For run records: ``world_size``, ``rank`` and ``backend``."""
        return {"world_size": self.size, "rank": self.rank, "backend": self.backend}


def launched() -> bool:
    """True when this process was started by ``torchrun`` with more than one process (``WORLD_SIZE > 1``)."""
    return launched_processes() > 1


def launched_processes() -> int:
    """The processes of this launch as the environment says (``WORLD_SIZE``; 1 when unset or unreadable), before
    any process group exists."""
    try:
        return max(1, int(os.environ.get("WORLD_SIZE", "1")))
    except ValueError:
        return 1


def launched_main() -> bool:
    """True on rank 0 of a launch as the environment says (``RANK``), or in a process of its own: the one that
    writes, before any process group exists."""
    return os.environ.get("RANK", "0").strip() in ("", "0")


def timeout() -> timedelta:
    """How long a rank waits in a collective step: ``$PROBES_DIST_TIMEOUT_MIN`` minutes (default 10).

    A rank that fails exits, and ``torchrun`` then ends the others at once; this limit is for a rank that
    hangs (or a machine that vanishes), so that the others fail with a timeout instead of waiting forever.
    """
    text = os.environ.get(TIMEOUT_ENV, "")
    try:
        minutes = float(text) if text else DEFAULT_TIMEOUT_MIN
    except ValueError:
        minutes = -1.0
    if not minutes > 0:
        raise ConfigError(f"{TIMEOUT_ENV}: expected a positive number of minutes, found {text!r}")
    return timedelta(minutes=minutes)


def _minutes(limit: timedelta) -> str:
    """``limit`` in minutes, as the error lines say it (``10 min``, ``2.5 min``)."""
    return f"{limit.total_seconds() / 60:g} min"


def collective_error(exc: BaseException, step: str) -> DistributedError:
    """One line for torch's failure ``exc`` in the collective step ``step``: a timeout (another rank stopped or
    hangs) or a rank that left the run; both say what to do."""
    text = " ".join(str(exc).split())
    try:
        limit = _minutes(timeout())
    except ConfigError:
        limit = f"${TIMEOUT_ENV} minutes"
    if "timed out" in text.lower() or "timeout" in text.lower():
        return DistributedError(
            f"the other ranks did not reach {step} within {limit} (a rank is stopped or hung; see its own "
            f"error line); set {TIMEOUT_ENV} to wait longer")
    reason = text.split("] ", 1)[-1][:200] or type(exc).__name__  # torch's "[file:line] " prefix left out
    return DistributedError(f"another rank left the run before {step} (it failed or was stopped; see its own "
                            f"error line): {reason}")


@contextlib.contextmanager
def collective(step: str) -> Iterator[None]:
    """Run a ``torch.distributed`` step, turning its failure (``RuntimeError``, ``DistBackendError``) into a
    :class:`~probes.errors.DistributedError` naming ``step``."""
    try:
        yield
    except DistributedError:
        raise
    except RuntimeError as exc:
        raise collective_error(exc, step) from exc


def init_world(device: str | None = None) -> World:
    """Join the process group ``torchrun`` set up (gloo on CPU, NCCL on CUDA) and return this rank's world.

    Does nothing (a world of one) when not launched by ``torchrun``; joins only once. Collective steps
    time out after :func:`timeout`.
    """
    if not launched():
        return World()
    import torch
    import torch.distributed as dist

    if not dist.is_initialized():
        cuda = (device or "").startswith("cuda") or (device is None and torch.cuda.is_available())
        backend = "nccl" if cuda and dist.is_nccl_available() else "gloo"
        if backend == "nccl":
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group(backend, timeout=timeout())
    return World.current()


def merge_analyses(analyses: Mapping[str, Any], world: World) -> dict[str, Any]:
    """Every rank's analyses, merged by name in rank order, on every rank (``analyses`` as they are in a world of one).

    Each analysis must be picklable; rank 0's objects receive the others' states through ``merge``, so the
    result equals one process' state over the concatenated contiguous shards.
    """
    if not world.distributed:
        return dict(analyses)
    gathered = world.gather(dict(analyses), "the merge of the analyses")
    merged = gathered[0]
    for other in gathered[1:]:
        for name, analysis in merged.items():
            analysis.merge(other[name])
    return merged


def block_record(world: World, ids: Sequence[str]) -> dict[str, Any]:
    """This rank's block of a split whose items (all ranks') have ``ids``, for ``run.json``.

    ``range``: ``[start, end)``, 0-based positions in input order; ``count``; ``first`` / ``last``: the ids
    of its first and last item (None for an empty block).
    """
    block = world.shard(len(ids))
    return {"range": [block.start, block.stop], "count": len(block),
            "first": str(ids[block.start]) if len(block) else None,
            "last": str(ids[block.stop - 1]) if len(block) else None}


def world_record(world: World, inputs: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """``run.json``'s ``world``: ``world_size``, ``backend`` and, per rank, the inputs it processed.

    ``inputs``: this rank's blocks by split (:func:`block_record`); gathered from every rank, so every
    rank must call this (a collective step).
    """
    gathered = world.gather(dict(inputs), "the run record")
    return {"world_size": world.size, "backend": world.backend,
            "ranks": [{"rank": rank, "inputs": blocks} for rank, blocks in enumerate(gathered)]}

"""Stateful worker classes of the RLHF example: a policy update with sharded state, a critic with replicated state.

Two data-parallel training groups over torch.distributed (gloo on CPU), each a small MLP regressing a
fixed random target function:

* :class:`ActorUpdateWorker` (``state_kind = "sharded"``): the policy update. Every rank holds a full
  model replica, but the Adam state is partitioned by ``ZeroRedundancyOptimizer``: each rank keeps
  and updates only its own shard of the parameters' optimizer state, then broadcasts the parameters
  it owns. No peer holds a rank's shard, so a lost rank can only be restored from a snapshot.
* :class:`CriticWorker` (``state_kind = "replicated"``): the value-function update. The model is
  wrapped in ``DistributedDataParallel`` with a plain Adam, so every rank holds bit-identical model
  *and* optimizer state and any live peer can restore a lost rank.

Both are deterministic, bit for bit, so tests and the supervisor can compare states by digest: the
weights are a pure function of ``seed``, each batch a pure function of ``(data_seed, step, rank)``,
the world size is fixed by the group, gloo's reductions on CPU are deterministic for a fixed world
size and buffer layout, and torch runs one thread per rank (no thread-count-dependent summation
order in the kernels).

State contract (what the supervisor's state layer calls on the worker itself, not through the
group): ``state_dict()`` returns ``{"step": int, "model": <module state_dict>, "optim": <optimizer
state_dict>}``; for the actor ``"optim"`` is this rank's local ZeRO shard only. ``load_state_dict``
makes the worker bit-identical to the one that produced the state.

torch is imported inside the methods, not at module import: the constructor stays cheap and the import
is paid in ``init_model``, under the spec's init timeout. The chaos suite's fault hooks of
:mod:`.workers` apply (``hang``/``crashloop`` at ``train_step``, ``slowstart``, ``slowinit``,
``slowstop``), and ``slowsnapshot`` holds a rank inside its next state copy (a snapshot's).
"""

from __future__ import annotations

import datetime
import inspect
import numbers
import os
from typing import TYPE_CHECKING, Any, ClassVar

from supervisor import Dispatch, Worker, register
from supervisor.core.state_tree import host_copy, state_digest, state_nbytes

from .workers import FAULT_DIR_ENV, _fault_delay, _fault_in_call, item_seed

if TYPE_CHECKING:
    import torch

__all__ = ["ActorUpdateWorker", "CriticWorker"]

# How long init_model waits for every rank to join, and each collective for its peers: a dead peer
# surfaces as an error within this instead of a call hanging until the supervisor's call timeout.
COLLECTIVE_TIMEOUT = datetime.timedelta(seconds=30)

# The padding buffer's name on the model (a key of state_dict()["model"]).
PAD_BUFFER = "pad"


# -- config, model and data --------------------------------------------------------------------


def _positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return value


def _non_negative_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be a non-negative int, got {value!r}")
    return value


def _number(name: str, value: Any, positive: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not (value > 0 if positive else value >= 0):
        raise ValueError(f"{name} must be a {'positive' if positive else 'non-negative'} number, got {value!r}")
    return float(value)


def pad_elements(pad_mb: float) -> int:
    """float32 elements of a ``pad_mb`` MiB padding buffer (rounded down)."""
    return int(pad_mb * 2**20) // 4


def rendezvous_store(addr: str, port: int, rank: int, world_size: int) -> Any:
    """The group's torch.distributed store, served by rank 0 on ``addr`` only.

    ``init_method="tcp://addr:port"`` would have rank 0's TCPStore listen on every address of its
    host, whatever ``addr`` says; the supervisor keeps every listener on the address Ray uses (the
    loopback on one machine), so rank 0 binds the socket itself and hands it to the store.

    The other ranks first wait for rank 0's listener themselves: a TCPStore client that finds no
    listener retries only after a backoff (measured: 0.2-0.8 s lost per re-formed group, when the
    supervisor's init reached a rank before rank 0).
    """
    import socket

    import torch.distributed as dist

    if rank != 0:
        _wait_for_listener(addr, port, COLLECTIVE_TIMEOUT.total_seconds())
        return dist.TCPStore(addr, port, world_size, False, COLLECTIVE_TIMEOUT)
    family = socket.AF_INET6 if ":" in addr else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((addr, port))
        listener.listen(world_size * 4)
    except BaseException:
        listener.close()
        raise
    return dist.TCPStore(addr, port, world_size, True, COLLECTIVE_TIMEOUT, wait_for_workers=False, master_listen_fd=listener.detach())


def _wait_for_listener(addr: str, port: int, timeout_s: float, poll_s: float = 0.005) -> None:
    """Until something accepts connections on ``addr:port`` (or ``timeout_s``: the store's own
    connect then reports the failure)."""
    import socket
    import time

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            socket.create_connection((addr, port), timeout=1.0).close()
            return
        except OSError:
            time.sleep(poll_s)


def build_mlp(in_dim: int, hidden: int, out_dim: int, seed: int, pad_mb: float) -> torch.nn.Sequential:
    """``Linear(in_dim, hidden) - tanh - Linear(hidden, out_dim)`` initialised from ``seed`` without
    touching the global RNG, with a non-trainable float32 buffer ``pad`` of ``pad_mb`` MiB (contents a
    function of ``seed``; present, possibly empty, whatever ``pad_mb``, so the state's layout does
    not depend on it)."""
    import torch

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = torch.nn.Sequential(torch.nn.Linear(in_dim, hidden), torch.nn.Tanh(), torch.nn.Linear(hidden, out_dim))
    # A generator of its own: the pad's contents do not depend on how many draws the layers took.
    gen = torch.Generator().manual_seed(seed)
    model.register_buffer(PAD_BUFFER, torch.rand(pad_elements(pad_mb), generator=gen, dtype=torch.float32))
    return model


def make_batch(in_dim: int, out_dim: int, batch_size: int, data_seed: int, step: int, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The batch of ``rank`` at ``step``: inputs ``x [batch_size, in_dim]`` and targets ``sin(x @ w)``
    ``[batch_size, out_dim]``, where ``w`` is a fixed random matrix of ``data_seed``. A pure function of
    its arguments: a re-run (or a replacement) trains on exactly the same data."""
    import torch

    target = torch.Generator().manual_seed(data_seed)
    w = torch.randn(in_dim, out_dim, generator=target) / in_dim**0.5
    gen = torch.Generator().manual_seed(item_seed(data_seed, step, rank))
    x = torch.randn(batch_size, in_dim, generator=gen)
    return x, torch.sin(x @ w)


def _fault_hold_state_copy(rank: int, step: int) -> None:
    """Chaos hook: with a ``slowsnapshot-<group>-<rank>`` marker (consumed) the next state copy of the
    rank (a snapshot's, during a run) first writes ``insnapshot-<group>-<rank>`` holding the state's
    step, then takes the seconds the marker holds: the suite kills the rank inside its snapshot."""
    directory = os.environ.get(FAULT_DIR_ENV)
    if not directory:
        return
    prefix = os.environ.get("WG_PREFIX", "").rstrip("_")
    marker = os.path.join(directory, f"slowsnapshot-{prefix}-{rank}")
    try:
        with open(marker) as f:
            seconds = float(f.read().strip() or 0)
        os.remove(marker)
    except (FileNotFoundError, ValueError):
        return
    import time

    with open(os.path.join(directory, f"insnapshot-{prefix}-{rank}"), "w") as f:
        f.write(str(step))
    time.sleep(seconds)


# -- workers -----------------------------------------------------------------------------------


class _TrainingWorker(Worker):
    """What both training groups share: config, collective init, the step, state and introspection.

    Subclasses say how the model is wrapped and which optimizer updates it (:meth:`_build`), how
    gradients are averaged (:meth:`_average_gradients`) and which optimizer holds the state
    (:meth:`_state_optimizer`).

    Args:
        in_dim, hidden, out_dim: the MLP's sizes (positive ints).
        seed: the weights' (and the pad's) seed (non-negative int).
        lr: Adam's learning rate (positive).
        batch_size: rows per rank per step (positive int).
        data_seed: the target function's and the batches' seed (non-negative int).
        pad_mb: MiB of extra, non-trainable state per rank (non-negative), to make a rank's state
            large for benchmarks.

    Raises:
        ValueError: an argument out of range. Checked here, cheaply: a spec with a typo fails at the
            actor's start, not at init.
    """

    state_kind: ClassVar[str] = "none"
    # What _build imports beyond torch.distributed: a standby's warm_up imports it ahead of its takeover.
    wrapper_modules: ClassVar[tuple[str, ...]] = ()

    def __init__(
        self,
        in_dim: int = 16,
        hidden: int = 32,
        out_dim: int = 1,
        seed: int = 0,
        lr: float = 1e-2,
        batch_size: int = 16,
        data_seed: int = 0,
        pad_mb: float = 0.0,
    ) -> None:
        super().__init__()
        _fault_delay("slowstart", os.environ.get("RANK", "standby"))  # a standby has no rank yet
        self.in_dim = _positive_int("in_dim", in_dim)
        self.hidden = _positive_int("hidden", hidden)
        self.out_dim = _positive_int("out_dim", out_dim)
        self.seed = _non_negative_int("seed", seed)
        self.lr = _number("lr", lr, positive=True)
        self.batch_size = _positive_int("batch_size", batch_size)
        self.data_seed = _non_negative_int("data_seed", data_seed)
        self.pad_mb = _number("pad_mb", pad_mb, positive=False)
        self.step = 0
        self._model: torch.nn.Module | None = None  # the plain module (what state_dict holds)
        self._forward: torch.nn.Module | None = None  # what the step calls: the module, or its DDP wrapper
        self._optimizer: Any = None
        self._init_rendezvous: str | None = None  # MASTER_ADDR:MASTER_PORT when init_model last ran

    # -- subclass hooks ---------------------------------------------------------------------------
    def _build(self, model: torch.nn.Module) -> tuple[torch.nn.Module, Any]:
        """The module the step calls and the optimizer (the process group is up)."""
        raise NotImplementedError

    def _average_gradients(self) -> None:
        """Make every rank's gradients the mean over ranks (nothing when the wrapper already did)."""

    def _state_optimizer(self) -> Any:
        """The optimizer whose state_dict is this rank's optimizer state."""
        return self._optimizer

    def _after_optimizer_load(self) -> None:
        """Hook run after the state optimizer loaded a state."""

    # -- lifecycle --------------------------------------------------------------------------------
    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self) -> dict[str, Any]:
        """Join the collective and build the model and optimizer from scratch. Safe to call again.

        Leaves any process group this process is in first, then joins the rendezvous that
        ``MASTER_ADDR``/``MASTER_PORT`` name *now* (the supervisor changes them when it replaces a
        rank, then re-runs this on every rank). Every rank must call it concurrently: joining and
        building the wrappers are collectives. Trained state is dropped; the supervisor restores it
        afterwards with :meth:`load_state_dict`.

        Returns:
            ``{"rank", "step" (0), "digest"}`` of the fresh state.

        Raises:
            RuntimeError / DistBackendError: the peers did not all join within 30 s.
        """
        import torch
        import torch.distributed as dist

        _fault_delay("slowinit", self.rank)
        # Drop the wrappers first: they hold the old process group, which is destroyed next.
        self._model = self._forward = self._optimizer = None
        if dist.is_initialized():
            dist.destroy_process_group()
        torch.set_num_threads(1)  # determinism (see the module docstring), and small actors share few cores
        addr, port = os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"]
        store = rendezvous_store(addr, int(port), self.rank, self.world_size)
        dist.init_process_group("gloo", store=store, rank=self.rank, world_size=self.world_size, timeout=COLLECTIVE_TIMEOUT)
        self._init_rendezvous = f"{addr}:{port}"
        model = build_mlp(self.in_dim, self.hidden, self.out_dim, self.seed, self.pad_mb)
        self._forward, self._optimizer = self._build(model)
        self._model = model
        self.step = 0
        return {"rank": self.rank, "step": self.step, "digest": state_digest(self.state_dict())}

    def warm_up(self) -> None:
        """A standby's preparation before it counts as ready (the group's ``standby_warmup_method``):
        the imports :meth:`init_model` would pay for, so the init after a takeover only joins the
        collective and builds the model. Rank-independent, and harmless to repeat."""
        import importlib

        import torch.distributed  # noqa: F401

        for module in self.wrapper_modules:
            importlib.import_module(module)

    def build_in_process_group(self) -> None:
        """Build the model and optimizer from scratch in the process group this process is already in.

        For a trainer that forms the collective itself instead of :meth:`init_model` (Ray Train in
        ``bench/state_goodput.py``): the same model, optimizer and steps, so its states compare by digest.
        """
        import torch

        torch.set_num_threads(1)  # as init_model: determinism, and few cores
        model = build_mlp(self.in_dim, self.hidden, self.out_dim, self.seed, self.pad_mb)
        self._forward, self._optimizer = self._build(model)
        self._model = model
        self.step = 0

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def shutdown(self) -> None:
        """Leave the process group and drop the model (harmless when repeated or before init)."""
        import sys

        _fault_delay("slowstop", self.rank)
        self._model = self._forward = self._optimizer = None
        dist = sys.modules.get("torch.distributed")  # never imported: nothing to leave
        if dist is not None and dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()

    # -- training ---------------------------------------------------------------------------------
    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def train_step(self, step: int) -> dict[str, Any]:
        """One optimisation step (a collective: every rank must run it) on this rank's batch of ``step``.

        Args:
            step: the step to apply; must be the worker's next one (``self.step``), so a step is never
                skipped or applied twice (e.g. by a retry after a restore).

        Returns:
            ``{"rank", "step" (the new one: step + 1), "loss" (this rank's mean squared error on its
            batch, before the update)}``.

        Raises:
            TypeError: ``step`` is not an int.
            ValueError: ``step`` is not the expected step (nothing is changed).
            RuntimeError: init_model has not run; or a collective failed (a peer died or timed out):
                the state may then be part-updated and the step counter is not advanced.
        """
        import torch

        _fault_in_call(self.rank)
        if isinstance(step, bool) or not isinstance(step, numbers.Integral):
            raise TypeError(f"{type(self).__name__} rank {self.rank}: step must be an int, got {step!r}")
        if step != self.step:
            raise ValueError(f"{type(self).__name__} rank {self.rank}: train_step out of order: expected step {self.step}, got {step}")
        forward = self._require()
        x, y = make_batch(self.in_dim, self.out_dim, self.batch_size, self.data_seed, int(step), self.rank)
        self._optimizer.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(forward(x), y)
        loss.backward()
        self._average_gradients()
        self._optimizer.step()
        self.step += 1
        return {"rank": self.rank, "step": self.step, "loss": float(loss.detach())}

    # -- state ------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """This rank's state: ``{"step": int, "model": module state_dict (parameters and the pad
        buffer), "optim": optimizer state_dict}``. Tensors alias the live ones (the caller copies).

        Raises:
            RuntimeError: init_model has not run.
        """
        self._require()
        assert self._model is not None
        _fault_hold_state_copy(self.rank, self.step)
        return {"step": self.step, "model": self._model.state_dict(), "optim": self._state_optimizer().state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Make this rank bit-identical to the rank that produced ``state`` (a :meth:`state_dict` of the
        same class, config and rank). Local only: no collective, so ranks may load one at a time.

        Raises:
            RuntimeError: init_model has not run.
            ValueError: ``state`` lacks a key, or its model or optimizer does not fit this rank's
                (another config, or, for a sharded state, another rank's shard).
        """
        self._require()
        assert self._model is not None
        missing = [key for key in ("step", "model", "optim") if key not in state]
        if missing:
            raise ValueError(f"{type(self).__name__} rank {self.rank}: state lacks {missing}")
        step = state["step"]
        if isinstance(step, bool) or not isinstance(step, numbers.Integral) or step < 0:
            raise ValueError(f"{type(self).__name__} rank {self.rank}: state step must be a non-negative int, got {step!r}")
        optimizer = self._state_optimizer()
        self._check_optim_fits(optimizer, state["optim"])
        try:
            self._model.load_state_dict(state["model"], strict=True)  # copies into the live tensors
        except RuntimeError as exc:
            raise ValueError(f"{type(self).__name__} rank {self.rank}: model state does not fit: {exc}") from None
        optimizer.load_state_dict(host_copy(state["optim"]))
        self._after_optimizer_load()
        self.step = int(step)

    def _check_optim_fits(self, optimizer: Any, optim_state: dict[str, Any]) -> None:
        # torch checks only the number of parameters per group: a shard of another rank with as many
        # parameters would load silently into the wrong shapes.
        params = [p for group in optimizer.param_groups for p in group["params"]]
        saved = [i for group in optim_state.get("param_groups", []) for i in group["params"]]
        if len(saved) != len(params):
            raise ValueError(f"{type(self).__name__} rank {self.rank}: optimizer state holds {len(saved)} parameters, this rank's {len(params)}")
        for index, param in zip(saved, params, strict=True):
            for name, value in optim_state.get("state", {}).get(index, {}).items():
                if hasattr(value, "dim") and value.dim() > 0 and tuple(value.shape) != tuple(param.shape):
                    raise ValueError(
                        f"{type(self).__name__} rank {self.rank}: optimizer state {name!r} of parameter {index} has shape "
                        f"{tuple(value.shape)}, the parameter {tuple(param.shape)} (another rank's shard?)"
                    )

    @register(dispatch_mode=Dispatch.ONE_TO_ALL, idempotent=True)
    def state_info(self) -> dict[str, Any]:
        """``{"rank", "step", "digest" (of the whole state_dict), "optim_digest" (of its "optim" part),
        "nbytes" (of its tensors), "init_rendezvous"}``; digests and nbytes are None before init."""
        if self._model is None:
            return {"rank": self.rank, "step": self.step, "digest": None, "optim_digest": None, "nbytes": None, "init_rendezvous": None}
        state = self.state_dict()
        nbytes = state_nbytes(state)
        return {
            "rank": self.rank,
            "step": self.step,
            "digest": state_digest(state),
            "optim_digest": state_digest(state["optim"]),
            "nbytes": nbytes,
            "init_rendezvous": self._init_rendezvous,
        }

    @register(dispatch_mode=Dispatch.ONE_TO_ALL, idempotent=True)
    def export_state(self) -> dict[str, Any]:
        """A copy of :meth:`state_dict` that shares no tensor with the live state (for drivers and
        tests that move a state between groups)."""
        return host_copy(self.state_dict())

    @register(dispatch_mode=Dispatch.ALL_TO_ALL, idempotent=True)
    def import_state(self, state: dict[str, Any]) -> dict[str, Any]:
        """:meth:`load_state_dict` through the group: pass a list with one state per rank (rank i
        loads entry i), or one state every rank loads (a replicated one).

        Returns:
            :meth:`state_info` after the load.
        """
        self.load_state_dict(state)
        return self.state_info()

    def _require(self) -> torch.nn.Module:
        if self._forward is None:
            raise RuntimeError(f"{type(self).__name__} rank {self.rank}: init_model has not run")
        return self._forward


class ActorUpdateWorker(_TrainingWorker):
    """The policy update: model replicas, Adam state sharded across ranks by ZeroRedundancyOptimizer.

    The gradients are averaged with one all_reduce of a flat buffer (fixed layout, so the summation
    order is the same every step and every run), then each rank's local Adam updates the parameters
    it owns and ZeRO broadcasts them, so the replicas stay identical. ``state_dict()["optim"]`` is
    this rank's local optimizer (``zero.optim``) only: the shard, not the consolidated state (which
    would need a collective and hold every rank's part).

    ZeRO partitions the parameters greedily by size, largest first; a rank that gets none (a world
    larger than the model's 4 parameter tensors) cannot build its local Adam, so keep the world size
    at most 4 or grow the model.
    """

    state_kind: ClassVar[str] = "sharded"
    wrapper_modules: ClassVar[tuple[str, ...]] = ("torch.distributed.optim",)

    def _build(self, model: torch.nn.Module) -> tuple[torch.nn.Module, Any]:
        import torch
        from torch.distributed.optim import ZeroRedundancyOptimizer

        zero = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.Adam, lr=self.lr)
        return model, zero

    def _average_gradients(self) -> None:
        import torch
        import torch.distributed as dist

        grads = [p.grad for p in self._require().parameters()]
        if any(g is None for g in grads):  # every parameter takes part in the loss: a bug if not
            raise RuntimeError(f"{type(self).__name__} rank {self.rank}: a parameter got no gradient")
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat, op=dist.ReduceOp.SUM)
        flat.div_(self.world_size)
        offset = 0
        for g in grads:
            g.copy_(flat[offset : offset + g.numel()].view_as(g))
            offset += g.numel()

    def _state_optimizer(self) -> Any:
        return self._optimizer.optim

    def _after_optimizer_load(self) -> None:
        # ZeRO copies its own param_groups' hyperparameters into the local optimizer before every
        # step: give it the loaded ones, or a state with another lr would be overwritten on the next step.
        for exposed, local in zip(self._optimizer.param_groups, self._optimizer.optim.param_groups, strict=True):
            for key, value in local.items():
                if key != "params":
                    exposed[key] = value


class CriticWorker(_TrainingWorker):
    """The value-function update: DistributedDataParallel over gloo and a plain Adam, so every rank
    holds the same model and optimizer state (any live peer's state restores a lost rank).

    Buffers are not synced before each forward (``forward_sync_buffers=False``, formerly
    ``broadcast_buffers=False``): the only buffer is the constant pad, identical on every rank from the
    seed; DDP's default would broadcast it from rank 0 before every forward (64 MiB per step for a
    benchmark's pad).
    """

    state_kind: ClassVar[str] = "replicated"
    wrapper_modules: ClassVar[tuple[str, ...]] = ("torch.nn.parallel",)

    def _build(self, model: torch.nn.Module) -> tuple[torch.nn.Module, Any]:
        import torch
        from torch.nn.parallel import DistributedDataParallel

        # DDP's constructor broadcasts rank 0's parameters and buffers: already equal, from the seed.
        # torch 2.13 renamed broadcast_buffers (deprecated) to forward_sync_buffers; the floor (2.7)
        # has only the old name.
        name = "forward_sync_buffers" if "forward_sync_buffers" in inspect.signature(DistributedDataParallel).parameters else "broadcast_buffers"
        ddp = DistributedDataParallel(model, **{name: False})
        return ddp, torch.optim.Adam(model.parameters(), lr=self.lr)

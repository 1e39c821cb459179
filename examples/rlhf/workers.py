"""Worker classes of the RLHF example: a rollout policy and a frozen reference policy.

Both hold the same tiny causal language model (embedding -> GRU -> linear head). Its weights are a
pure function of ``(vocab_size, hidden, seed)``, so every rank, and every replacement the supervisor
starts, holds bit-identical weights. Sampling draws its randomness per item from
``(seed, step, uid)``, never from a stream shared by the shard, so an item's response does not depend
on which rank generates it or on what else is in the shard. That is what makes the data methods
safe to register ``idempotent=True``: when a rank dies mid-call, a supervised group re-runs its shard on
the replacement and gets back exactly the rows the dead rank would have returned.

torch is imported inside the methods, not at module import: actor processes start light and the
import cost is paid in ``init_model``, under the spec's init timeout.

Fault hooks for the chaos suite (``chaos/``): when ``RLHF_FAULT_DIR`` is set in a worker's environment,
a file ``hang-<group>-<rank>`` there makes that rank's next data call hang (the file is consumed), and
a file ``crashloop-<group>-<rank>`` makes every actor of that rank exit at its first data call (a
worker that crashes as soon as it gets work, on every start). A file ``slowinit-<group>-<rank>``
(or ``slowinit-<group>-all``) holding a number of seconds makes ``init_model`` take that long (a
model load), and ``slowstop-...`` does the same for ``shutdown`` (a checkpoint); neither is consumed.
``slowstart-...`` for the constructor (a worker importing torch). ``<group>`` is the group's name
prefix without its trailing ``_`` (``rollout``). Without the variable nothing is checked.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from supervisor import Dispatch, Worker, register

if TYPE_CHECKING:
    import torch

    from supervisor import DataProto

__all__ = ["LMConfig", "RolloutWorker", "ReferenceWorker", "item_seed"]


@dataclass(frozen=True)
class LMConfig:
    """Shape and seed of the tiny language model; identical configs give identical weights."""

    vocab_size: int = 64
    hidden: int = 32
    seed: int = 0
    max_new_tokens: int = 16

    def __post_init__(self) -> None:
        for name in ("vocab_size", "hidden", "max_new_tokens"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"seed must be a non-negative int, got {self.seed!r}")


def item_seed(seed: int, step: int, uid: int) -> int:
    """The sampling seed of one item: a well-mixed 64-bit function of the model seed, step and uid."""
    return int(np.random.SeedSequence([seed, step, uid]).generate_state(1, dtype=np.uint64)[0])


# -- the model ---------------------------------------------------------------------------------
# A ModuleDict plus a forward function rather than an nn.Module subclass: a class body would need
# torch at import time.


def build_lm(config: LMConfig) -> torch.nn.ModuleDict:
    """The frozen model of ``config``, initialised from ``config.seed`` without touching the global RNG."""
    import torch

    torch.set_num_threads(1)  # many small actors share few cores; one thread each avoids oversubscription
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(config.seed)
        lm = torch.nn.ModuleDict(
            {
                "embed": torch.nn.Embedding(config.vocab_size, config.hidden),
                "rnn": torch.nn.GRU(config.hidden, config.hidden, batch_first=True),
                "head": torch.nn.Linear(config.hidden, config.vocab_size),
            }
        )
    return lm.eval().requires_grad_(False)


def lm_forward(
    lm: torch.nn.ModuleDict, tokens: torch.Tensor, state: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Next-token logits ``[n, t, vocab]`` for ``tokens [n, t]``, and the recurrent state after them."""
    hidden, state = lm["rnn"](lm["embed"](tokens), state)
    return lm["head"](hidden), state


def weights_digest(lm: torch.nn.ModuleDict) -> str:
    """A short hash of every parameter's bytes: equal digests mean bit-identical weights."""
    digest = hashlib.sha256()
    for name, param in sorted(lm.state_dict().items()):
        digest.update(name.encode())
        digest.update(param.detach().contiguous().numpy().tobytes())
    return digest.hexdigest()[:16]


def _check_tokens(name: str, tokens: torch.Tensor, vocab_size: int) -> None:
    import torch

    if tokens.dtype != torch.int64 or tokens.dim() != 2:
        raise ValueError(f"{name} must be an int64 tensor [n, len], got {tokens.dtype} {list(tokens.shape)}")
    if tokens.numel() and (int(tokens.min()) < 0 or int(tokens.max()) >= vocab_size):
        raise ValueError(f"{name} holds ids outside [0, {vocab_size}): min {int(tokens.min())}, max {int(tokens.max())}")


def _uids(data: DataProto) -> np.ndarray:
    if "uid" not in data.non_tensor_batch:
        raise ValueError("the batch needs a non_tensor_batch['uid'] of int item ids")
    uids = np.asarray(data.non_tensor_batch["uid"])
    if len(uids) and (not all(isinstance(u, int | np.integer) for u in uids) or min(uids) < 0):
        raise ValueError("non_tensor_batch['uid'] must hold non-negative ints")
    return uids


# -- fault hooks (chaos suite) ------------------------------------------------------------------

FAULT_DIR_ENV = "RLHF_FAULT_DIR"


def _fault_marker(kind: str, rank: int, consume: bool) -> bool:
    directory = os.environ.get(FAULT_DIR_ENV)
    if not directory:
        return False
    group = os.environ.get("WG_PREFIX", "").rstrip("_")
    path = os.path.join(directory, f"{kind}-{group}-{rank}")
    if not os.path.exists(path):
        return False
    if consume:
        try:
            os.remove(path)
        except FileNotFoundError:  # another incarnation took it
            return False
    return True


def _fault_delay(kind: str, rank: int | str) -> None:
    """Sleep for the seconds a ``<kind>-<group>-<rank>`` (or ``-all``) marker holds, if there is one."""
    directory = os.environ.get(FAULT_DIR_ENV)
    if not directory:
        return
    group = os.environ.get("WG_PREFIX", "").rstrip("_")
    for who in (str(rank), "all"):
        try:
            with open(os.path.join(directory, f"{kind}-{group}-{who}")) as f:
                seconds = float(f.read().strip() or 0)
        except (FileNotFoundError, ValueError):
            continue
        import time

        time.sleep(seconds)
        return


def _fault_in_call(rank: int) -> None:
    if _fault_marker("crashloop", rank, consume=False):
        os._exit(1)
    if _fault_marker("hang", rank, consume=True):
        import time

        time.sleep(3600)  # stuck inside the call: only the supervisor's call timeout ends it


# -- workers -----------------------------------------------------------------------------------


class _TinyLMWorker(Worker):
    """What both roles share: the config, ``init_model``, introspection and ``shutdown``.

    Args:
        vocab_size, hidden, seed, max_new_tokens: see :class:`LMConfig`.
    """

    def __init__(self, vocab_size: int = 64, hidden: int = 32, seed: int = 0, max_new_tokens: int = 16) -> None:
        super().__init__()
        _fault_delay("slowstart", os.environ.get("RANK", "standby"))  # a standby has no rank yet
        self.config = LMConfig(vocab_size=vocab_size, hidden=hidden, seed=seed, max_new_tokens=max_new_tokens)
        self._lm: torch.nn.ModuleDict | None = None
        self._init_rendezvous: str | None = None  # MASTER_ADDR:MASTER_PORT when init_model last ran

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self) -> str:
        """Build the model. Safe to call again. Returns the weights digest.

        Also imports the DataProto machinery (tensordict, ~seconds on a small box) so the first data
        call, possibly a retried shard on a fresh replacement, does not pay for it.
        """
        import supervisor.core.protocol  # noqa: F401  (import for its cost, see above)

        _fault_delay("slowinit", self.rank)
        # What a collective init would join (torch.distributed reads these): kept to show which
        # rendezvous this rank was initialised on.
        self._init_rendezvous = f"{os.environ.get('MASTER_ADDR')}:{os.environ.get('MASTER_PORT')}"
        self._lm = build_lm(self.config)
        return weights_digest(self._lm)

    def warm_up(self) -> None:
        """A standby's preparation before it counts as ready (the group's ``standby_warmup_method``):
        the imports init_model would pay for, so a takeover's init only builds the model."""
        import torch  # noqa: F401

        import supervisor.core.protocol  # noqa: F401

    @register(dispatch_mode=Dispatch.ONE_TO_ALL, idempotent=True)
    def ping(self) -> int:
        return self.rank

    @register(dispatch_mode=Dispatch.ONE_TO_ALL, idempotent=True)
    def model_info(self) -> dict[str, Any]:
        """Config, process id, weights digest and init rendezvous of this rank (None before init)."""
        digest = weights_digest(self._lm) if self._lm is not None else None
        return {"rank": self.rank, "pid": os.getpid(), "weights_digest": digest, "init_rendezvous": self._init_rendezvous, **asdict(self.config)}

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def shutdown(self) -> None:
        """Release the model (called at teardown; harmless when repeated or before init)."""
        _fault_delay("slowstop", self.rank)
        self._lm = None

    def _model(self) -> torch.nn.ModuleDict:
        if self._lm is None:
            raise RuntimeError(f"{type(self).__name__} rank {self.rank}: init_model has not run")
        return self._lm


class RolloutWorker(_TinyLMWorker):
    """The policy: samples ``max_new_tokens`` response tokens per prompt."""

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO, idempotent=True)
    def generate(self, prompts: DataProto) -> DataProto:
        """Sample a response for every prompt.

        Args:
            prompts: ``batch["input_ids"]`` int64 ``[n, prompt_len]`` (prompt_len >= 1),
                ``non_tensor_batch["uid"]`` non-negative int item ids, ``meta_info["step"]`` (default 0).

        Returns:
            ``input_ids`` (the prompts), ``responses`` int64 ``[n, max_new_tokens]`` and ``uid``, row for
            row as given; ``meta_info`` is passed through. Row ``i`` depends only on the weights, its
            prompt and ``(seed, step, uid[i])``, so a re-run returns the same rows.
        """
        import torch

        from supervisor import DataProto

        _fault_in_call(self.rank)
        lm, cfg = self._model(), self.config
        input_ids = prompts.batch["input_ids"]
        _check_tokens("input_ids", input_ids, cfg.vocab_size)
        if input_ids.shape[1] < 1:
            raise ValueError("prompts must hold at least one token")
        uids = _uids(prompts)
        step = int(prompts.meta_info.get("step", 0))
        n = len(uids)

        # Gumbel-max sampling (argmax of logits + Gumbel noise draws from softmax(logits)) with the
        # noise drawn up front from each item's own generator: the batch is sampled in one pass, yet
        # no item's draws depend on the others.
        noise = torch.empty(n, cfg.max_new_tokens, cfg.vocab_size)
        for i, uid in enumerate(uids):
            gen = torch.Generator().manual_seed(item_seed(cfg.seed, step, int(uid)))
            uniform = torch.rand(cfg.max_new_tokens, cfg.vocab_size, generator=gen)
            noise[i] = -torch.log(-torch.log(uniform))  # uniform == 0 gives -inf: never sampled

        responses = torch.empty(n, cfg.max_new_tokens, dtype=torch.int64)
        if n:
            with torch.no_grad():
                logits, state = lm_forward(lm, input_ids)
                for t in range(cfg.max_new_tokens):
                    token = (logits[:, -1] + noise[:, t]).argmax(dim=-1)
                    responses[:, t] = token
                    logits, state = lm_forward(lm, token.unsqueeze(1), state)
        return DataProto.from_dict(
            tensors={"input_ids": input_ids, "responses": responses},
            non_tensors={"uid": uids},
            meta_info=prompts.meta_info,
        )


class ReferenceWorker(_TinyLMWorker):
    """The frozen reference policy: scores responses, never samples."""

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO, idempotent=True)
    def compute_ref_log_prob(self, data: DataProto) -> DataProto:
        """Log-probability of each response token given the prompt and the response tokens before it.

        Args:
            data: ``input_ids`` ``[n, prompt_len]``, ``responses`` ``[n, resp_len]`` and ``uid``
                (what :meth:`RolloutWorker.generate` returns).

        Returns:
            ``ref_log_prob`` float32 ``[n, resp_len]`` and ``uid``, row for row as given;
            ``meta_info`` is passed through.
        """
        import torch

        from supervisor import DataProto

        _fault_in_call(self.rank)
        lm, cfg = self._model(), self.config
        input_ids, responses = data.batch["input_ids"], data.batch["responses"]
        _check_tokens("input_ids", input_ids, cfg.vocab_size)
        _check_tokens("responses", responses, cfg.vocab_size)
        if input_ids.shape[1] < 1:
            raise ValueError("prompts must hold at least one token")
        uids = _uids(data)
        n, prompt_len, resp_len = len(uids), input_ids.shape[1], responses.shape[1]

        ref_log_prob = torch.zeros(n, resp_len, dtype=torch.float32)
        if n and resp_len:
            with torch.no_grad():
                # Teacher forcing: position prompt_len-1+t predicts response token t.
                tokens = torch.cat([input_ids, responses], dim=1)[:, :-1]
                logits, _ = lm_forward(lm, tokens)
                log_probs = torch.log_softmax(logits[:, prompt_len - 1 :].float(), dim=-1)
                ref_log_prob = log_probs.gather(-1, responses.unsqueeze(-1)).squeeze(-1)
        return DataProto.from_dict(
            tensors={"ref_log_prob": ref_log_prob},
            non_tensors={"uid": uids},
            meta_info=data.meta_info,
        )

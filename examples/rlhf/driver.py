"""The driver of the RLHF example: the step loop the supervisor daemon runs (``[driver] function``).

Each step builds a batch of prompts, has the rollout group sample responses, has the reference group
score them, and computes the reward here; then the trained groups, when the spec has them, take one
optimisation step each: the critic (replicated state: DDP) and the actor update (sharded state:
ZeRO), see :mod:`.training`. Their state survives a rank's death: the driver calls
``ctx.step_boundary(step)`` before each step (the snapshots), and on ``RolledBack`` goes back to the
step it names, so every step is applied exactly once to the state the job ends with. The rollout and reference calls are supervised group calls:
if a rank dies mid-call, its shard is re-run on the replacement (both methods are idempotent), so the
driver sees an ordinary, complete result. The driver does not trust that: every step checks that each
uid it sent came back exactly once and in order, and that the outputs have the promised shapes, and it
raises ``RuntimeError`` otherwise (the daemon then exits 1).

Prompts are a pure function of ``(data_seed, step)`` and responses a pure function of the weights, the
prompt and ``(seed, step, uid)``, so a step's ``rollout_digest`` is the same in every run of the same
spec, with or without failures: a chaos run can be compared with a clean one step for step.

``[driver.args]`` (all optional):

* ``steps`` (10): steps in the whole job; a resumed daemon continues from the saved ``step``;
* ``batch_size`` (32), ``prompt_len`` (8): prompts per step and tokens per prompt;
* ``target_token`` (7): the token the reward counts (see :mod:`.reward`);
* ``data_seed`` (0): seed of the prompt stream;
* ``step_interval_s`` (0): pause between steps, so a chaos test can act mid-run;
* ``rollout_group`` ("rollout"), ``reference_group`` ("reference"): the group names in the spec;
* ``actor_group`` ("actor"), ``critic_group`` ("critic"): the trained groups; a spec without them
  trains nothing;
* ``checkpoint_path`` (none): a file the driver writes the next step to after every step, and resumes
  from at start, the way a checkpoint-restart job (verl's answer to a failure) carries its progress
  from one job to the next: ``bench/goodput.py`` compares that with supervision.
"""

from __future__ import annotations

import collections
import hashlib
import json
import os
import time
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from supervisor import DataProto
from supervisor.errors import RolledBack

from .reward import score

if TYPE_CHECKING:
    from supervisor import DriverContext, WorkerGroup

__all__ = ["DriverArgs", "UidMismatch", "main", "make_prompts", "check_uids", "read_checkpoint", "write_checkpoint"]


@dataclass(frozen=True)
class DriverArgs:
    """The ``[driver.args]`` of the spec, validated (see the module docstring)."""

    steps: int = 10
    batch_size: int = 32
    prompt_len: int = 8
    target_token: int = 7
    data_seed: int = 0
    step_interval_s: float = 0.0
    rollout_group: str = "rollout"
    reference_group: str = "reference"
    actor_group: str = "actor"
    critic_group: str = "critic"
    checkpoint_path: str = ""

    @classmethod
    def from_args(cls, args: dict[str, Any]) -> DriverArgs:
        """Raises ValueError on an unknown key (a typo in the spec), a wrong type or an out-of-range value."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(args) - known)
        if unknown:
            raise ValueError(f"unknown [driver.args] key(s) {unknown}; known: {sorted(known)}")
        values: dict[str, Any] = {}
        for f in fields(cls):
            if f.name not in args:
                continue
            value, kind = args[f.name], type(f.default)
            # bool is an int to Python, never to a spec; an int is a fine float
            ok = not isinstance(value, bool) and isinstance(value, int | float if kind is float else kind)
            if not ok:
                raise ValueError(f"driver.args.{f.name} must be of type {kind.__name__}, got {value!r}")
            values[f.name] = kind(value)
        parsed = cls(**values)
        for name in ("steps", "data_seed", "target_token"):
            if getattr(parsed, name) < 0:
                raise ValueError(f"driver.args.{name} must be >= 0, got {getattr(parsed, name)}")
        for name in ("batch_size", "prompt_len"):
            if getattr(parsed, name) < 1:
                raise ValueError(f"driver.args.{name} must be >= 1, got {getattr(parsed, name)}")
        if parsed.step_interval_s < 0:
            raise ValueError(f"driver.args.step_interval_s must be >= 0, got {parsed.step_interval_s}")
        return parsed


def make_prompts(step: int, batch_size: int, prompt_len: int, vocab_size: int, data_seed: int = 0) -> DataProto:
    """The prompts of ``step``: random token ids, uids ``step * batch_size + arange(batch_size)``.

    Auto-padding is on, so any batch size splits across any number of ranks.
    """
    rng = np.random.default_rng([data_seed, step])
    input_ids = torch.from_numpy(rng.integers(0, vocab_size, size=(batch_size, prompt_len), dtype=np.int64))
    uids = step * batch_size + np.arange(batch_size, dtype=np.int64)
    return DataProto.from_dict(
        tensors={"input_ids": input_ids}, non_tensors={"uid": uids}, meta_info={"step": step}, auto_padding=True
    )


class UidMismatch(RuntimeError):
    """A group returned other rows than it was sent: ``lost`` and ``duplicated`` count the items."""

    def __init__(self, method: str, message: str, lost: int, duplicated: int) -> None:
        super().__init__(message)
        self.method, self.lost, self.duplicated = method, lost, duplicated


def check_uids(method: str, sent: np.ndarray, received: DataProto) -> None:
    """Raise :class:`UidMismatch` unless ``received`` holds exactly the uids ``sent``, in the same order."""
    got = np.asarray(received.non_tensor_batch.get("uid", np.array([], dtype=np.int64)))
    if got.shape == sent.shape and np.array_equal(got, sent):
        return
    counts = collections.Counter(int(u) for u in got)
    missing = sorted(int(u) for u in sent if int(u) not in counts)
    duplicated = sorted(u for u, c in counts.items() if c > 1)
    unexpected = sorted(set(counts) - {int(u) for u in sent})
    problems = [
        f"{label} {values[:20]}{' ...' if len(values) > 20 else ''}"
        for label, values in (("missing", missing), ("duplicated", duplicated), ("unexpected", unexpected))
        if values
    ] or ["same uids in a different order"]
    extra = sum(c - 1 for c in counts.values() if c > 1)
    raise UidMismatch(method, f"{method}: sent {len(sent)} uids, got {len(got)}: {'; '.join(problems)}", len(missing), extra)


def _rollout_digest(uids: np.ndarray, responses: torch.Tensor) -> str:
    digest = hashlib.sha256(np.ascontiguousarray(uids, dtype=np.int64).tobytes())
    digest.update(responses.contiguous().numpy().tobytes())
    return digest.hexdigest()[:16]


def _model_info(group: WorkerGroup, role: str) -> dict[str, Any]:
    """The config all ranks of ``group`` share; RuntimeError when their configs or weights differ."""
    infos = group.model_info()
    shared = [{k: v for k, v in info.items() if k not in ("rank", "pid")} for info in infos]
    if any(s != shared[0] for s in shared[1:]):
        raise RuntimeError(f"{role} ranks disagree on their model: {shared}")
    if shared[0]["weights_digest"] is None:
        raise RuntimeError(f"{role} ranks have no model: init_model has not run")
    return shared[0]


def read_checkpoint(path: Path | None) -> int:
    """The next step a checkpoint file holds (0 when there is none yet)."""
    if path is None or not path.exists():
        return 0
    return int(json.loads(path.read_text())["step"])


def write_checkpoint(path: Path, step: int) -> None:
    """Write the next step atomically: a reader (or the next job) never sees half a file."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps({"step": step, "time": time.time()}))
    os.replace(tmp, path)


def run_step(step: int, args: DriverArgs, rollout: WorkerGroup, reference: WorkerGroup, vocab_size: int) -> dict[str, Any]:
    """One step: prompts -> rollout -> reference log-probs -> reward, with every invariant checked.

    Returns:
        The step's structured record (timings in seconds, means, and the rollout digest).

    Raises:
        RuntimeError: a group returned missing, duplicated or reordered rows, or malformed outputs.
    """
    started = time.perf_counter()
    prompts = make_prompts(step, args.batch_size, args.prompt_len, vocab_size, args.data_seed)
    sent = prompts.non_tensor_batch["uid"]

    out = rollout.generate(prompts)
    rollout_done = time.perf_counter()
    check_uids("generate", sent, out)
    responses = out.batch["responses"]
    if not torch.equal(out.batch["input_ids"], prompts.batch["input_ids"]):
        raise RuntimeError("generate: the returned prompts differ from the prompts sent")
    if responses.dim() != 2 or responses.shape[0] != len(sent):
        raise RuntimeError(f"generate: responses has shape {list(responses.shape)}, expected [{len(sent)}, n]")

    ref = reference.compute_ref_log_prob(out)
    ref_done = time.perf_counter()
    check_uids("compute_ref_log_prob", sent, ref)
    ref_log_prob = ref.batch["ref_log_prob"]
    if ref_log_prob.shape != responses.shape:
        raise RuntimeError(f"compute_ref_log_prob: ref_log_prob has shape {list(ref_log_prob.shape)}, expected {list(responses.shape)}")
    if not bool(torch.isfinite(ref_log_prob).all()) or bool((ref_log_prob > 0).any()):
        raise RuntimeError("compute_ref_log_prob: ref_log_prob holds values that are not finite log-probabilities")

    reward = score(responses, args.target_token)
    finished = time.perf_counter()
    return {
        "step": step,
        "rollout_s": round(rollout_done - started, 4),
        "ref_s": round(ref_done - rollout_done, 4),
        "step_s": round(finished - started, 4),
        "reward_mean": round(float(reward.mean()), 6),
        "ref_log_prob_mean": round(float(ref_log_prob.mean()), 6),
        "rollout_digest": _rollout_digest(sent, responses),
        "items": len(sent),
    }


def main(ctx: DriverContext) -> None:
    """Run steps ``progress["step"]`` .. ``args.steps - 1``, saving progress after each one.

    Returns early (after the current step) when the daemon is asked to stop.

    Raises:
        ValueError: bad ``[driver.args]``.
        KeyError: a group named in the args is not in the spec.
        RuntimeError: an invariant failed (see :func:`run_step`), or the groups' models do not match.
    """
    args = DriverArgs.from_args(ctx.args)
    log = ctx.log
    for name in (args.rollout_group, args.reference_group):
        if name not in ctx.groups:
            raise KeyError(f"driver: no group {name!r} in the spec (groups: {sorted(ctx.groups)})")
    rollout, reference = ctx.groups[args.rollout_group], ctx.groups[args.reference_group]

    # The reference scores the rollout's tokens, so the two must share a vocabulary.
    policy, ref_model = _model_info(rollout, "rollout"), _model_info(reference, "reference")
    if policy["vocab_size"] != ref_model["vocab_size"]:
        raise RuntimeError(f"rollout vocab_size {policy['vocab_size']} != reference vocab_size {ref_model['vocab_size']}")
    if args.target_token >= policy["vocab_size"]:
        raise ValueError(f"driver.args.target_token {args.target_token} is outside the vocabulary ({policy['vocab_size']})")

    trained = [ctx.groups[name] for name in (args.critic_group, args.actor_group) if name in ctx.groups]
    checkpoint = Path(args.checkpoint_path) if args.checkpoint_path else None
    start = max(int(ctx.progress.get("step", 0)), read_checkpoint(checkpoint))
    if ctx.resume_step is not None:  # the trained groups' state is at this step: it wins over saved progress
        start = ctx.resume_step
    log.info(
        "rlhf_start",
        start_step=start,
        steps=args.steps,
        resumed=ctx.resumed,
        batch_size=args.batch_size,
        rollout_ranks=rollout.world_size,
        reference_ranks=reference.world_size,
        trained_groups=[g.name for g in trained],
        weights_digest=policy["weights_digest"],
        reference_is_initial_policy=policy["weights_digest"] == ref_model["weights_digest"],
    )
    step_times: list[float] = []

    def summary() -> dict[str, Any]:
        mean = sum(step_times) / len(step_times) if step_times else 0.0
        return {"steps": args.steps, "run_steps": len(step_times), "mean_step_s": round(mean, 4)}

    step = start
    while step < args.steps:
        if ctx.stop_requested.is_set():
            log.info("rlhf_stopped", next_step=step, **summary())
            return
        try:
            ctx.step_boundary(step)  # snapshots of the trained groups' state before the step
            record = run_step(step, args, rollout, reference, policy["vocab_size"])
            record["losses"] = {g.name: [round(r["loss"], 6) for r in g.train_step(step)] for g in trained}
        except UidMismatch as exc:  # counted by whoever reads the log (the chaos suite), then fatal
            log.error("rlhf_items_mismatch", step=step, method=exc.method, lost=exc.lost, duplicated=exc.duplicated)
            raise
        except RolledBack as rolled_back:  # a trained rank was lost: its state, and every other, is at this step again
            log.warning("rlhf_rolled_back", from_step=step, to_step=rolled_back.step, medium=rolled_back.medium)
            step = ctx.rolled_back(rolled_back)
            continue
        step_times.append(record["step_s"])
        log.info("rlhf_step", **record)
        ctx.save_progress({"step": step + 1, "steps": args.steps, "rollout_digest": record["rollout_digest"]})
        if checkpoint is not None:
            write_checkpoint(checkpoint, step + 1)
        if args.step_interval_s and step + 1 < args.steps:
            ctx.stop_requested.wait(args.step_interval_s)  # wakes at once on a stop request
        step += 1
    log.info("rlhf_done", **summary(), state=trained_state(trained))


def trained_state(groups: list[WorkerGroup]) -> dict[str, list[dict[str, Any]]]:
    """Each trained rank's step and state digest: a run with failures must end with the fault-free
    run's digests, bit for bit (the chaos suite compares them)."""
    return {g.name: [{"rank": i["rank"], "step": i["step"], "digest": i["digest"]} for i in g.state_info()] for g in groups}

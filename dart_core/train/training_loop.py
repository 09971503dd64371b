"""The training loop every drafter's trainer runs: AdamW with warmup and a cosine that follows steps or the wall
clock, whichever is further along; held-out evaluation and early stopping that keeps the best weights; a JSONL
log; resumable checkpoints that carry the clock and the early-stopping record. Kept apart from the trainers' shared
set-up (``common.py``) so that one module holds what makes the methods' budgets equal."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from dart_core.drafters.base import DrafterLayer
from dart_core.loading.atomic import atomic_output


def make_optimizer(model: nn.Module, lr: float, steps: int, warmup: int, weight_decay: float,
                   spent: Callable[[], float] | None = None,
                   ) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR]:
    """AdamW with linear warmup then cosine decay to 10% of ``lr``. ``spent()``: the share of a wall-clock budget
    used so far (0..1); the cosine then follows whichever of steps and time is further along, so a run cut by its
    budget still ends annealed."""
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.95), weight_decay=weight_decay)

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        frac = max((step - warmup) / max(1, steps - warmup), spent() if spent is not None else 0.0)
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, frac)))

    return opt, torch.optim.lr_scheduler.LambdaLR(opt, factor)


def rounded(value: Any, digits: int = 5) -> Any:
    """``value`` with every float (in lists and dicts too) kept to ``digits`` significant digits: a training log
    ships in the bundle, whose size is capped, and digits past the fifth say nothing about a run."""
    if isinstance(value, float):
        return float(f"{value:.{digits}g}")
    if isinstance(value, list | tuple):
        return [rounded(v, digits) for v in value]
    if isinstance(value, dict):
        return {k: rounded(v, digits) for k, v in value.items()}
    return value


class JsonlLog:
    """Append-only JSON-lines log (one object per logged step) in the output directory, floats to 5 significant
    digits, no spaces."""

    def __init__(self, path: Path, append: bool = False) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.f = path.open("a" if append else "w")

    def write(self, record: dict[str, Any]) -> None:
        self.f.write(json.dumps(rounded(record), separators=(",", ":")) + "\n")
        self.f.flush()

    def close(self) -> None:
        self.f.close()


def _autocast(device: torch.device) -> Any:
    """bfloat16 autocast for the drafter (fp32 master weights and optimizer) where bf16 is multiplied natively: CUDA,
    or a CPU with AVX512-BF16 / AMX (a DART step is much faster there,
    measured: docs/benchmarks.md#measurements-behind-design-choices); plain fp32 elsewhere, where emulated bf16
    would be slower than fp32."""
    import contextlib

    from dart_core.engine.cpu import cpu_has_native_bf16

    if device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    if device.type == "cpu" and cpu_has_native_bf16():
        return torch.autocast("cpu", dtype=torch.bfloat16)
    return contextlib.nullcontext()


class EarlyStop:
    """The held-out loss watch: a new best (lower by more than ``min_delta``) keeps a copy of the weights; after
    ``patience`` evaluations without one (0: never) training stops, and the best weights are restored at the end."""

    def __init__(self, patience: int, min_delta: float = 1e-4) -> None:
        self.patience, self.min_delta = patience, min_delta
        self.best_loss, self.best_step, self.stale = math.inf, 0, 0
        self.best_state: dict[str, torch.Tensor] | None = None

    def update(self, step: int, loss: float, model: nn.Module) -> bool:
        """Record an evaluation; True when training should stop."""
        if loss < self.best_loss - self.min_delta:
            self.best_loss, self.best_step, self.stale = loss, step, 0
            self.best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        else:
            self.stale += 1
        return bool(self.patience) and self.stale >= self.patience

    def restore(self, model: nn.Module) -> None:
        if self.best_state is not None:
            model.load_state_dict(self.best_state)

    def state(self) -> dict[str, Any]:
        return {"best_loss": self.best_loss, "best_step": self.best_step, "stale": self.stale,
                "best_state": self.best_state}

    def load(self, state: dict[str, Any]) -> None:
        self.best_loss, self.best_step = float(state["best_loss"]), int(state["best_step"])
        self.stale, self.best_state = int(state["stale"]), state["best_state"]


def train_loop(kind: str, model: DrafterLayer, source: Any, loss_fn: Any, *, steps: int, batch_windows: int,
               lr: float, warmup: int | None, weight_decay: float, clip: float, seed: int, out_dir: Path,
               log_every: int, eval_source: Any | None, eval_fn: Any, progress: bool,
               checkpoint: Any | None = None, checkpoint_every: int = 0, time_budget_s: float | None = None,
               eval_every: int = 0, patience: int = 0) -> dict[str, Any]:
    """The loop every trainer shares: sample windows (seeded) from ``source`` (``len`` + ``get(idx)`` → ids,
    features, teacher), the drafter loss, AdamW + warmup/cosine, grad clipping, tqdm postfix and a JSONL log.
    ``loss_fn(model, feats, teach, windows, generator) -> (loss, kl per depth, top1 per depth)``.
    It ends after ``steps``, when ``time_budget_s`` of wall clock (evaluations included) is spent, or when the
    held-out loss (every ``eval_every`` steps) has not improved for ``patience`` evaluations; with evaluations
    during training the best evaluated weights are kept. ``checkpoint(step, model, opt, sched, generator, extra)``
    is called every ``checkpoint_every`` steps (resumable runs); a ``resume`` dict from an earlier checkpoint
    restarts the loop where it stopped, its clock and early-stopping record included."""
    import time

    from tqdm.auto import tqdm

    if eval_every and eval_source is None:
        raise ValueError("eval_every needs held-out windows (eval_windows or eval data)")
    if time_budget_s is not None and time_budget_s <= 0:
        raise ValueError(f"time_budget_s must be > 0, got {time_budget_s}")
    g = torch.Generator().manual_seed(seed)
    clock = {"spent": 0.0, "since": time.perf_counter()}

    def elapsed() -> float:
        return clock["spent"] + time.perf_counter() - clock["since"]

    def spent() -> float:
        return elapsed() / time_budget_s if time_budget_s else 0.0

    if warmup is None:
        warmup = max(1, steps // 20) if time_budget_s is None else max(1, min(steps // 20, 100))
    opt, sched = make_optimizer(model, lr, steps, warmup, weight_decay, spent)
    watch = EarlyStop(patience)
    first = 0
    resume = getattr(checkpoint, "resume_state", None)
    if resume is not None:
        opt.load_state_dict(resume["optimizer"])
        sched.load_state_dict(resume["scheduler"])
        g.set_state(resume["generator"])
        first = int(resume["step"])
        clock["spent"] = float(resume.get("elapsed_s", 0.0))
        if resume.get("early_stop"):
            watch.load(resume["early_stop"])
    log = JsonlLog(out_dir / "train_log.jsonl", append=first > 0)
    stats: dict[str, Any] = {"kind": kind, "windows": len(source), "steps": steps}
    if eval_source is not None and first == 0:
        stats["eval_before"] = eval_fn(model, eval_source)
        if eval_every:
            watch.update(0, stats["eval_before"]["loss"], model)
    model.train()
    t_target = t_train = t_eval = 0.0
    bar = tqdm(range(first, steps), desc=f"train {kind}", disable=not progress, initial=first, total=steps)
    last: dict[str, Any] = {}
    stopped, done = "steps", first
    for step in bar:
        idx = torch.randint(0, len(source), (batch_windows,), generator=g)
        t0 = time.perf_counter()
        batch, feats, teach = source.get(idx)
        t1 = time.perf_counter()
        with _autocast(feats.device):
            loss, kl, top1 = loss_fn(model, feats, teach, batch, g)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gnorm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), clip))
        opt.step()
        sched.step()
        t2 = time.perf_counter()
        t_target, t_train = t_target + (t1 - t0), t_train + (t2 - t1)
        done = step + 1
        last = {"step": done, "loss": float(loss.detach()), "lr": sched.get_last_lr()[0], "grad_norm": gnorm,
                "kl": [round(float(x), 5) for x in kl], "top1": [round(float(x), 4) for x in top1],
                "elapsed_s": round(elapsed(), 2)}
        if done % max(1, log_every) == 0 or done == steps:
            log.write(last)
        bar.set_postfix(loss=f"{float(loss.detach()):.3f}", top1="/".join(f"{float(x):.2f}" for x in top1[:4]))
        if eval_every and done % eval_every == 0 and done < steps:
            t3 = time.perf_counter()
            ev = eval_fn(model, eval_source)
            model.train()
            t_eval += time.perf_counter() - t3
            log.write({"step": done, "eval": ev, "elapsed_s": round(elapsed(), 2)})
            if watch.update(done, ev["loss"], model):
                stopped = "early"
        if stopped == "steps" and time_budget_s is not None and elapsed() >= time_budget_s and done < steps:
            stopped = "budget"
        if stopped != "steps":
            break
        if checkpoint is not None and checkpoint_every and done % checkpoint_every == 0 and done < steps:
            clock["spent"], clock["since"] = elapsed(), time.perf_counter()
            checkpoint(done, model, opt, sched, g, {"elapsed_s": clock["spent"], "early_stop": watch.state()})
    bar.close()
    log.close()
    model.eval()
    n_seen = (done - first) * batch_windows
    stats.update(last=last, target_s=t_target, train_s=t_train, eval_s=round(t_eval, 2), resumed_from=first,
                 steps_done=done, stopped=stopped, elapsed_s=round(elapsed(), 1), time_budget_s=time_budget_s,
                 windows_per_s=n_seen / max(1e-9, t_target + t_train),
                 train_windows_per_s=n_seen / max(1e-9, t_train))
    if eval_every and eval_source is not None:
        ev = eval_fn(model, eval_source)  # the final weights too: the best of every evaluation is kept
        watch.update(done, ev["loss"], model)
        watch.restore(model)
        model.eval()
        stats.update(best_step=watch.best_step, best_eval_loss=watch.best_loss)
    if eval_source is not None:
        stats["eval_after"] = eval_fn(model, eval_source)
    return stats


@torch.no_grad()
def evaluate(model: DrafterLayer, source: Any, loss_fn: Any, batch_windows: int, seed: int = 1234) -> dict[str, Any]:
    """Held-out loss / per-depth KL / per-depth top-1 agreement over every window of ``source``, with fixed
    sampling (same anchors every call)."""
    was = model.training
    model.eval()
    g = torch.Generator().manual_seed(seed)
    losses, kls, tops = [], [], []
    for i in range(0, len(source), batch_windows):
        batch, feats, teach = source.get(torch.arange(i, min(i + batch_windows, len(source))))
        with _autocast(feats.device):
            loss, kl, top1 = loss_fn(model, feats, teach, batch, g)
        losses.append(float(loss))
        kls.append(kl.float())
        tops.append(top1.float())
    model.train(was)
    return {"loss": sum(losses) / len(losses), "kl": torch.stack(kls).mean(0).tolist(),
            "top1": torch.stack(tops).mean(0).tolist()}


class Checkpointer:
    """Resumable training: ``train_state.pt`` (drafter weights, optimizer, schedule, sampler state, step) in the
    output directory, written atomically, read back with ``weights_only=True``, removed when training ends."""

    def __init__(self, out_dir: Path, model: nn.Module, resume: bool) -> None:
        self.path = out_dir / "train_state.pt"
        self.resume_state: dict[str, Any] | None = None
        if resume and self.path.is_file():
            state = torch.load(self.path, map_location="cpu", weights_only=True)
            model.load_state_dict(state["model"])
            self.resume_state = state

    def __call__(self, step: int, model: nn.Module, opt: Any, sched: Any, g: torch.Generator,
                 extra: dict[str, Any] | None = None) -> None:
        with atomic_output(self.path) as tmp:  # a unique name: no other writer's file is ever renamed
            torch.save({"step": step, "model": model.state_dict(), "optimizer": opt.state_dict(),
                        "scheduler": sched.state_dict(), "generator": g.get_state(), **(extra or {})}, tmp)

    def finish(self) -> None:
        self.path.unlink(missing_ok=True)


def train_and_save(kind: str, model: nn.Module, source: Any, eval_source: Any, loss_fn: Any, out: Path,
                   save: Any, *, batch_windows: int, resume: bool, checkpoint_every: int,
                   **loop: Any) -> dict[str, Any]:
    """The training loop with held-out eval and resumable checkpoints in ``out``, then ``save()`` (the published
    format) and the checkpoint removed: what every trainer runs once its model and windows are ready."""

    def eval_fn(m: Any, src: Any) -> dict[str, Any]:
        return evaluate(m, src, loss_fn, batch_windows)

    ckpt = Checkpointer(out, model, resume)
    stats = train_loop(kind, model, source, loss_fn, batch_windows=batch_windows, out_dir=out,
                       eval_source=eval_source, eval_fn=eval_fn, checkpoint=ckpt, checkpoint_every=checkpoint_every,
                       **loop)
    save()
    ckpt.finish()
    return stats

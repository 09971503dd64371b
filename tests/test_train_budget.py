"""The fair training budget: every drafter gets the same wall clock and stops when its held-out loss stops
improving. The loop ends by steps, by budget or early, keeps the best evaluated weights, anneals its learning rate
to the budget's end, and resumes with its clock and early-stopping record; held-out windows can come from a store
of held-out prompts' answers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from dart_core.train.common import TrainConfig
from dart_core.train.training_loop import Checkpointer, EarlyStop, JsonlLog, make_optimizer, train_loop


class Source:
    """Windows of a fixed regression task: ids, features x, targets y = x @ w (w fixed)."""

    def __init__(self, n: int = 32) -> None:
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, 4, 8, generator=g)
        self.y = self.x @ torch.randn(8, 3, generator=g)

    def __len__(self) -> int:
        return int(self.x.shape[0])

    def get(self, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return torch.zeros(len(idx), 4, dtype=torch.long), self.x[idx], self.y[idx]


def mse(model: nn.Module, feats: torch.Tensor, teach: torch.Tensor, _w: Any, _g: Any) -> Any:
    err = ((model(feats) - teach) ** 2).mean()
    return err, err.detach()[None], torch.zeros(1)


def rigged_eval(losses: list[float], seen: list[dict[str, torch.Tensor]]) -> Any:
    """Held-out losses in a fixed order; each call records the weights it scored."""
    it = iter(losses)

    def fn(model: nn.Module, _src: Any) -> dict[str, Any]:
        seen.append({k: v.detach().clone() for k, v in model.state_dict().items()})
        return {"loss": next(it), "kl": [0.0], "top1": [0.0]}

    return fn


def run(tmp_path: Path, eval_fn: Any, **kw: Any) -> tuple[nn.Module, dict[str, Any]]:
    torch.manual_seed(0)
    model = nn.Linear(8, 3)
    opts = {"steps": 40, "batch_windows": 4, "lr": 1e-2, "warmup": 2, "weight_decay": 0.0, "clip": 1.0,
            "seed": 0, "out_dir": tmp_path, "log_every": 1, "eval_source": Source(), "eval_fn": eval_fn,
            "progress": False}
    opts.update(kw)
    return model, train_loop("toy", model, Source(), mse, **opts)


def test_patience_stops_training_and_the_best_evaluated_weights_are_kept(tmp_path: Path) -> None:
    seen: list[dict[str, torch.Tensor]] = []
    # before, step 5 (best), 10, 15 (two without a new best: patience 2 stops it), then the final check
    model, stats = run(tmp_path, rigged_eval([5.0, 1.0, 2.0, 3.0, 9.0, 9.0], seen), eval_every=5, patience=2)
    assert stats["stopped"] == "early" and stats["steps_done"] == 15
    assert stats["best_step"] == 5 and stats["best_eval_loss"] == 1.0
    for k, v in model.state_dict().items():  # the weights scored at step 5 (the second evaluation)
        assert torch.equal(v, seen[1][k]), k
        assert not torch.equal(v, seen[3][k]), k
    log = (tmp_path / "train_log.jsonl").read_text().splitlines()
    assert sum('"eval"' in line for line in log) == 3


def test_without_patience_it_runs_every_step_and_keeps_the_best(tmp_path: Path) -> None:
    seen: list[dict[str, torch.Tensor]] = []
    losses = [5.0, 4.0, 3.0, 2.5, 3.5, 3.0, 3.0, 4.0, 0.5, 0.5]  # before, steps 5..35, final (best), eval_after
    model, stats = run(tmp_path, rigged_eval(losses, seen), eval_every=5)
    assert stats["stopped"] == "steps" and stats["steps_done"] == 40
    assert stats["best_step"] == 40  # the final weights beat every evaluation
    for k, v in model.state_dict().items():
        assert torch.equal(v, seen[8][k]), k


def test_a_wall_clock_budget_ends_the_run_and_anneals_the_schedule(tmp_path: Path, monkeypatch: Any) -> None:
    import time

    ticks = iter(range(10**6))
    monkeypatch.setattr(time, "perf_counter", lambda: float(next(ticks)))  # each clock read: one second later
    _, stats = run(tmp_path, lambda m, s: {"loss": 1.0, "kl": [0.0], "top1": [0.0]}, steps=10**5,
                   time_budget_s=60.0)
    assert stats["stopped"] == "budget" and stats["steps_done"] < 60
    assert stats["elapsed_s"] >= 60.0
    model = nn.Linear(2, 2)
    share = [0.0]
    opt, sched = make_optimizer(model, 1.0, steps=10**5, warmup=2, weight_decay=0.0, spent=lambda: share[0])
    for _ in range(3):
        opt.step()
        sched.step()
    assert sched.get_last_lr()[0] == pytest.approx(1.0, abs=1e-3)  # steps alone: the cosine has barely begun
    share[0] = 0.5
    sched.step()
    assert sched.get_last_lr()[0] == pytest.approx(0.55, abs=1e-3)  # half the budget: half way down
    share[0] = 1.0
    sched.step()
    assert sched.get_last_lr()[0] == pytest.approx(0.1)  # the budget spent: the floor


def test_a_resumed_run_carries_its_clock_and_early_stopping_record(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = nn.Linear(8, 3)
    ckpt = Checkpointer(tmp_path, model, resume=False)
    watch = EarlyStop(patience=3)
    watch.update(7, 0.25, model)
    watch.update(9, 0.5, model)
    opt, sched = make_optimizer(model, 1e-2, 20, 2, 0.0)
    ckpt(10, model, opt, sched, torch.Generator(), {"elapsed_s": 42.0, "early_stop": watch.state()})
    again = nn.Linear(8, 3)
    back = Checkpointer(tmp_path, again, resume=True)
    assert back.resume_state is not None and back.resume_state["elapsed_s"] == 42.0
    restored = EarlyStop(patience=3)
    restored.load(back.resume_state["early_stop"])
    assert (restored.best_step, restored.best_loss, restored.stale) == (7, 0.25, 1)
    assert restored.update(11, 0.3, again) is False and restored.update(12, 0.3, again) is True


def test_bad_budgets_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="eval_every needs held-out windows"):
        run(tmp_path, None, eval_source=None, eval_every=5)
    with pytest.raises(ValueError, match="time_budget_s must be > 0"):
        run(tmp_path, None, time_budget_s=0.0)
    with pytest.raises(TypeError, match="unknown training option"):
        TrainConfig().with_(budget_minutes=3)


def test_the_training_log_keeps_five_significant_digits(tmp_path: Path) -> None:
    log = JsonlLog(tmp_path / "log.jsonl")
    log.write({"step": 3, "loss": 1 / 3, "eval": {"kl": [2 / 3, 12345.678], "top1": (0.123456,)}, "lr": 1e-7,
               "name": "dart"})
    log.close()
    line = (tmp_path / "log.jsonl").read_text()
    assert line == ('{"step":3,"loss":0.33333,"eval":{"kl":[0.66667,12346.0],"top1":[0.12346]},"lr":1e-07,'
                    '"name":"dart"}\n')


def test_a_window_subset_is_a_seeded_sorted_choice_of_the_windows() -> None:
    """train_windows: the trainer sees ``count`` of the source's windows, the same ones for the same seed (a resumed
    run too), in the source's order; asking for none, or for more than there are, is refused."""
    from dart_core.train.common import WindowSubset, pick_windows

    class Source:
        def __len__(self) -> int:
            return 50

        def get(self, idx: torch.Tensor) -> torch.Tensor:
            return idx * 10

    sub = WindowSubset(Source(), 7, seed=3)
    ids = sub.ids.tolist()
    assert len(sub) == 7 and ids == sorted(set(ids)) and all(0 <= i < 50 for i in ids)
    assert WindowSubset(Source(), 7, seed=3).ids.tolist() == ids != WindowSubset(Source(), 7, seed=4).ids.tolist()
    assert sub.get(torch.tensor([0, 6])).tolist() == [ids[0] * 10, ids[6] * 10]
    assert isinstance(pick_windows(Source(), TrainConfig()), Source)
    assert len(pick_windows(Source(), TrainConfig(train_windows=50))) == 50
    for bad in (0, 51):
        with pytest.raises(ValueError, match="train_windows"):
            WindowSubset(Source(), bad, seed=0)

"""Every racer's settings (the fields that size its tree or chain, from the registry) as ``--<racer>-<flag>``
options: declared here for ``generate``, the benchmarks and, for the switches, the app; unset, a racer keeps its
defaults for the device."""

from __future__ import annotations

import argparse
from dataclasses import replace
from typing import Any

import torch

from dart_core.drafters.settings import check_settings
from dart_core.engine.budget import NODE
from dart_core.racers.registry import RACERS, drafting_racers, racer


def add_racer_settings_arguments(p: argparse.ArgumentParser, *, switches_only: bool = False) -> None:
    """One group per drafting racer; ``switches_only``: only its on/off settings (the app, whose page has a
    control for every number)."""
    for r in drafting_racers():
        ks = [k for k in r.knobs() if k.kind is bool or not switches_only]
        if not ks:
            continue
        g = p.add_argument_group(f"{r.label} settings (defaults: the reference's on GPUs; where a CPU default is "
                                 "given, a verify forward there costs time in proportion to its nodes)")
        for k in ks:
            if k.kind is bool:  # a switch: --<racer>-<flag> / --no-<racer>-<flag>
                g.add_argument(f"--{r.key}-{k.flag}", dest=f"{r.dest}__{k.name}", default=None,
                               action=argparse.BooleanOptionalAction,
                               help=f"{k.help} (default {'on' if k.default else 'off'})")
                continue
            cpu = f"; CPU {k.cpu}" if k.cpu is not None else ""
            g.add_argument(f"--{r.key}-{k.flag}", dest=f"{r.dest}__{k.name}", type=k.kind, default=None,
                           metavar="N" if k.kind is int else "X",
                           help=f"{k.help} (default {k.default}{cpu}; {k.low:g}..{k.high:g})")


def knob_argv(r: Any, k: Any, value: Any) -> list[str]:
    """A setting's value as the command-line words that set it (a switch: ``--<racer>-<flag>`` or ``--no-…``)."""
    if k.kind is bool:
        return [f"--{'' if value else 'no-'}{r.key}-{k.flag}"]
    return [f"--{r.key}-{k.flag}", str(value)]


def given_settings(args: argparse.Namespace, key: str, settings: Any) -> Any:
    """``settings`` of racer ``key`` with every option the user set applied on top (ValueError naming the
    option when out of bounds)."""
    r = racer(key)
    given = {k.name: v for k in r.knobs() if (v := getattr(args, f"{r.dest}__{k.name}", None)) is not None}
    return check_settings(replace(settings, **given) if given else settings, f"--{r.key}:")


def racer_settings(args: argparse.Namespace, device: str | torch.device) -> dict[str, Any]:
    """Per racer key: its settings for ``device`` and ``--budget`` with the options the user set applied
    (:func:`given_settings`)."""
    budget = getattr(args, "budget", NODE)
    return {r.key: given_settings(args, r.key, r.default_settings(device, budget)) for r in RACERS}

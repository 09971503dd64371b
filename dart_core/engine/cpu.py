"""What this CPU multiplies natively, read from Linux's flags: where bf16 pays (dot-product units) and where it is
emulated and slower than float32. The engine's kernels, the drafters and training ask it the same way."""

from __future__ import annotations

import os

NATIVE_BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})  # /proc/cpuinfo's names of bf16 dot-product units


def _cpuinfo_fields(cpuinfo: str | os.PathLike[str]) -> dict[str, str]:
    """Each field's first value in Linux's cpuinfo, read once; empty where it cannot be read."""
    fields: dict[str, str] = {}
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as f:
            for line in f:
                key, sep, value = line.partition(":")
                if sep:
                    fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    return fields


def _cpuinfo_field(name: str, cpuinfo: str | os.PathLike[str]) -> str | None:
    """The first ``name`` line's value in Linux's cpuinfo; None where there is none."""
    return _cpuinfo_fields(cpuinfo).get(name)


def cpu_flags(cpuinfo: str | os.PathLike[str] = "/proc/cpuinfo") -> frozenset[str]:
    """The CPU's feature flags as Linux lists them (the first ``flags`` line); empty where it does not."""
    return frozenset((_cpuinfo_field("flags", cpuinfo) or "").split())


def cpu_model_name(cpuinfo: str | os.PathLike[str] = "/proc/cpuinfo") -> str | None:
    """The CPU's model as Linux names it (``model name``), for records of where something ran."""
    return _cpuinfo_field("model name", cpuinfo) or None


def cpu_description(cpuinfo: str | os.PathLike[str] = "/proc/cpuinfo") -> str | None:
    """The CPU for a benchmark's record: its model name, family and model numbers (cloud machines often mask the
    name to ``AMD EPYC``, the numbers still tell the generation) and its widest vector tier, which decides float32
    against bf16 and the kernels' speed. None where Linux's cpuinfo cannot be read."""
    fields = _cpuinfo_fields(cpuinfo)
    name = fields.get("model name")
    if name is None:
        return None
    flags = frozenset(fields.get("flags", "").split())
    tier = ("AVX-512 with native bf16" if cpu_has_native_bf16(flags) else "AVX-512" if "avx512f" in flags
            else "AVX2" if "avx2" in flags else "no AVX2")
    numbers = [f"{label} {fields[key]}" for key, label in (("cpu family", "family"), ("model", "model"))
               if key in fields]
    return f"{name} ({', '.join([*numbers, tier])})"


def cpu_has_native_bf16(flags: frozenset[str] | None = None) -> bool:
    """Whether this CPU has bf16 dot-product instructions (AVX512-BF16 or AMX-BF16), read from its flags
    (default :func:`cpu_flags`). Not oneDNN's ``_is_mkldnn_bf16_supported``: it answers True on any AVX-512 CPU,
    native bf16 or not."""
    return bool(NATIVE_BF16_FLAGS & (cpu_flags() if flags is None else flags))


# ``--dtype auto``'s meaning, one sentence for every command's help
AUTO_DTYPE_HELP = ("auto (bfloat16 on CUDA and on a CPU with native bf16, AVX512-BF16 or AMX; float32 on other CPUs), "
                   "float32, float16, bfloat16")


def auto_dtype_name(device_type: str, flags: frozenset[str] | None = None) -> str:
    """What ``--dtype auto`` loads in on a device type (``cuda``, ``cpu``, ...): bfloat16 on CUDA and on a CPU with
    native bf16 dot products, where plain decoding runs faster than in float32 and a verify costs fewer decoding
    steps (measured: docs/benchmarks.md#measurements-behind-design-choices); float32 elsewhere, where bf16 is
    emulated and slower.
    ``flags``: the CPU's (default :func:`cpu_flags`)."""
    if device_type == "cuda" or (device_type == "cpu" and cpu_has_native_bf16(flags)):
        return "bfloat16"
    return "float32"


def available_ram() -> int | None:
    """Bytes of RAM the system can still hand out (psutil, else Linux's ``MemAvailable``); None where unknown."""
    try:
        import psutil

        return int(psutil.virtual_memory().available)
    except ImportError:
        pass
    try:
        with open("/proc/meminfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None

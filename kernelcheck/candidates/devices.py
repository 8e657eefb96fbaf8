"""Which devices exist here, and if not, exactly why not.

torch_npu is imported only when the npu device is asked for or probed, with torch's
backend autoload off, so that a torch_npu without CANN cannot break ``import torch``.
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import torch

DEVICES = ("cpu", "cuda", "npu")
DEFAULT_CANN_HOME = "/usr/local/Ascend/ascend-toolkit/latest"


@dataclass(frozen=True)
class DeviceStatus:
    name: str
    available: bool
    reason: str
    detail: dict = field(default_factory=dict)


def status(name: str) -> DeviceStatus:
    return {"cpu": _cpu, "cuda": _cuda, "npu": _npu}[name]()


def all_status() -> dict[str, DeviceStatus]:
    return {d: status(d) for d in DEVICES}


def pick_auto() -> str:
    """cuda, then npu, then cpu."""
    for name in ("cuda", "npu"):
        if status(name).available:
            return name
    return "cpu"


def torch_device(name: str) -> torch.device:
    return torch.device("cpu" if name == "cpu" else f"{name}:0")


def synchronize(name: str) -> None:
    if name == "cuda":
        torch.cuda.synchronize()
    elif name == "npu":
        torch.npu.synchronize()


def _cpu() -> DeviceStatus:
    return DeviceStatus("cpu", True, "", {"threads": torch.get_num_threads()})


@lru_cache(maxsize=1)
def _cuda() -> DeviceStatus:
    if torch.version.cuda is None:
        return DeviceStatus("cuda", False, f"torch {torch.__version__} is a build without CUDA")
    try:
        count = torch.cuda.device_count()
    except Exception as exc:  # a broken driver raises here
        return DeviceStatus("cuda", False, f"CUDA driver error: {exc}")
    if count == 0 or not torch.cuda.is_available():
        return DeviceStatus("cuda", False, "no CUDA GPU visible (driver missing or no device)")
    names = [torch.cuda.get_device_name(i) for i in range(count)]
    return DeviceStatus("cuda", True, "", {"count": count, "names": names})


CANN_DEFAULTS = (DEFAULT_CANN_HOME, "/usr/local/Ascend/cann")


def cann_home() -> tuple[Path, bool]:
    """Where CANN is (ASCEND_HOME_PATH, ASCEND_TOOLKIT_HOME, then the defaults) and if it exists."""
    for var in ("ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME"):
        value = os.environ.get(var, "").strip()
        if value:
            return Path(value), Path(value).is_dir()
    for default in CANN_DEFAULTS:
        if Path(default).is_dir():
            return Path(default), True
    return Path(DEFAULT_CANN_HOME), False


def cann_problem() -> str | None:
    """None if a CANN toolkit folder is found, else why not."""
    home, found = cann_home()
    if found:
        return None
    if os.environ.get("ASCEND_HOME_PATH", "").strip():
        return f"CANN not found: ASCEND_HOME_PATH={home} is not a directory"
    return (
        f"CANN not found: ASCEND_HOME_PATH is not set and none of {', '.join(CANN_DEFAULTS)} "
        "exists (source <CANN>/set_env.sh)"
    )


def import_torch_npu() -> str | None:
    """Import torch_npu once; None on success, else the reason it failed."""
    return _import_torch_npu()


@lru_cache(maxsize=1)
def _import_torch_npu() -> str | None:
    if importlib.util.find_spec("torch_npu") is None:
        return "torch_npu not installed"
    try:
        import torch_npu  # noqa: F401
    except BaseException as exc:  # noqa: BLE001 - a broken backend may raise anything
        if isinstance(exc, KeyboardInterrupt):
            raise
        text = str(exc).splitlines()[0] if str(exc) else ""
        return f"torch_npu not importable: {type(exc).__name__}: {text}"
    return None


@lru_cache(maxsize=1)
def _npu() -> DeviceStatus:
    home, has_cann = cann_home()
    detail = {
        "torch_npu_installed": importlib.util.find_spec("torch_npu") is not None,
        "cann_home": str(home),
        "cann_found": has_cann,
    }
    problem = _import_torch_npu()
    if problem:
        if not has_cann:
            problem += f"; {cann_problem()}"
        return DeviceStatus("npu", False, problem, detail)
    try:
        count = torch.npu.device_count()
    except Exception as exc:
        return DeviceStatus("npu", False, f"torch_npu error: {exc}", detail)
    if count == 0:
        return DeviceStatus("npu", False, "torch_npu imported but no NPU visible", detail)
    detail["count"] = count
    return DeviceStatus("npu", True, "", detail)

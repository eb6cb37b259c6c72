"""The simulator package: an optional extra, imported only on demand, quietly, with a pinned API."""

from __future__ import annotations

import subprocess
import sys

import pytest

import pev.sim
from pev.cli._demo import DEMO_FAULTS
from pev.sim import Fault, World

PUBLIC = [
    "CONTRACT",
    "FAULT_PATHS",
    "GOAL",
    "INSTALL_HINT",
    "POLICY",
    "ArmController",
    "ArmEvent",
    "Camera",
    "Fault",
    "FaultPath",
    "Frame",
    "MoveReport",
    "PerceptionVerifier",
    "Pose",
    "PoseSensor",
    "Recovery",
    "Scene",
    "SceneObserver",
    "SimArm",
    "SymbolicPlanner",
    "TrayGeometry",
    "World",
    "inject",
    "path_taken",
    "run_demo",
    "sim_tools",
]


def _python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=60
    )


def test_the_public_api_is_pinned() -> None:
    """pev.sim's __all__ is exactly the pinned list."""
    assert sorted(pev.sim.__all__) == sorted(PUBLIC)


def test_importing_pev_does_not_import_the_simulator() -> None:
    """`import pev` loads neither pev.sim nor pybullet."""
    done = _python(
        "import sys, pev, pev.cli; print('pev.sim' in sys.modules, 'pybullet' in sys.modules)"
    )
    assert done.stdout.split() == ["False", "False"], done.stderr


def test_without_pybullet_the_import_error_names_the_extra() -> None:
    """Importing pev.sim without pybullet raises an ImportError that says what to install."""
    done = _python("import sys; sys.modules['pybullet'] = None; import pev.sim")
    assert done.returncode == 1
    assert "ImportError" in done.stderr
    assert "pip install 'pev-agent[sim]'" in done.stderr


def test_importing_the_simulator_prints_nothing() -> None:
    """pybullet's build banner is swallowed: `pev demo` output stays clean."""
    done = _python("import pev.sim")
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


def test_the_command_line_offers_every_fault_in_order() -> None:
    """`pev demo --fault` lists the Fault values, in the order the demo runs them."""
    assert list(DEMO_FAULTS) == [fault.value for fault in Fault]


def test_a_negative_seed_is_refused() -> None:
    """Seeds are whole numbers from 0."""
    with pytest.raises(ValueError, match="seed"):
        World(seed=-1)

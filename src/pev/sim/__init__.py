"""The embedded demo: a Franka Panda arm puts cubes in a tray, in headless pybullet.

See docs/design.md §10.

Needs the ``sim`` extra (``pip install 'pev-agent[sim]'``); importing this package without it
raises an :class:`ImportError` that says so. ``import pev`` never imports it.

:func:`run_demo` runs one task with a :class:`Fault` armed on the devices, and
:data:`FAULT_PATHS` documents the path each fault must take through the kernel.
"""

from pev.sim._arm import ArmEvent, SimArm, sim_tools
from pev.sim._bullet import INSTALL_HINT
from pev.sim._camera import Camera, Frame
from pev.sim._controller import ArmController, MoveReport
from pev.sim._demo import CONTRACT, GOAL, POLICY, path_taken, run_demo
from pev.sim._faults import FAULT_PATHS, Fault, FaultPath, Recovery, inject
from pev.sim._observer import SceneObserver
from pev.sim._perception import PerceptionVerifier
from pev.sim._planner import SymbolicPlanner
from pev.sim._scene import Pose, Scene, TrayGeometry
from pev.sim._world import PoseSensor, World

__all__ = [
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

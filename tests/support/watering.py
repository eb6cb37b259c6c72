"""The task of the engine and rail tests: water the plants until the soil is damp."""

from __future__ import annotations

from pev.model import Plan, PlanNode, VerificationContract, VerificationMode

GOAL = "water the plants"
CRITERION = "the soil is damp"
RECOVERY = VerificationContract(VerificationMode.RECOVERY, GOAL, (CRITERION,))
ENFORCE = VerificationContract(VerificationMode.ENFORCE, GOAL, (CRITERION,))
PLAN = Plan(GOAL, (PlanNode("water", "pour water"),))  # one action, no tool

# Pour with the can, then look at the soil with the camera.
POUR = PlanNode("pour", "pour water", tool="can")
LOOK = PlanNode("look", "look at the soil", tool="camera", after=("pour",))

"""Run the weather example: ``python examples/weather/run.py [CITY]`` (Lisbon by default).

Prints the result, the published bulletin and the records the verifier cited. Exits 0 only if
the task succeeded.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

# The example's own agent.py, found through the path set just above.
import agent

import pev


def main(city: str = "Lisbon") -> int:
    """Run the task in memory, print what it did, and return the exit code."""
    store = pev.MemoryStore()
    result = pev.run_sync(agent.Place(city=city), agent=agent.weather, store=store)
    print(f"status: {result.status} ({result.reason}) after {result.revisions} revision(s)")
    if result.output is not None:  # the Bulletin the agent published
        print(f"published on {result.output.channel}: {result.output.text}")
    state = asyncio.run(pev.Ledger(store).state(result.task_id))
    verdict = state.verdicts[-1].verdict if state.verdicts else None
    if verdict is not None:
        for criterion in verdict.criteria:
            refs = ", ".join(criterion.evidence_refs) or "no records"
            print(f"  {criterion.status}: {criterion.criterion} ({refs})")
        if verdict.feedback:
            print(f"  feedback: {verdict.feedback}")
    if result.diagnosis is not None and not result.ok:
        print(f"diagnosis: {result.diagnosis.cause} ({', '.join(sorted(result.diagnosis.nodes))})")
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:2]))

"""pev: a runtime for agents that plan, act and check their own work.

pev diagnoses why something failed before deciding what to do next (Plan → Execute → Verify →
Diagnose → Dispatch), and keeps every plan of a task in an append-only, hash-chained ledger.
"""

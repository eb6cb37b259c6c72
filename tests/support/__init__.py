"""Shared test support: builders of events, records and states, and Hypothesis strategies.

Test files import from here (``from tests.support.builders import created``): with pytest's
``--import-mode=importlib`` the ``tests`` folder is importable as a namespace package. Nothing
here is collected as a test.

- :mod:`tests.support.builders`: ledger events, execution records, evidence and folded states.
- :mod:`tests.support.postgres`: the PostgreSQL server the store tests use, and throwaway schemas.
- :mod:`tests.support.phases`: the parcel task in each phase, and one event per row of the phase
  rule (the fold tests).
- :mod:`tests.support.histories`: a Hypothesis strategy of histories the engine could write.
- :mod:`tests.support.strategies`: Hypothesis strategies of model values (the codec tests) and
  ledger events.
- :mod:`tests.support.tools`: node contexts and nodes for the tool executor tests.
- :mod:`tests.support.watering`: the engine tests' task, watering the plants.
- :mod:`tests.support.modules`: user modules a test writes, importable by name (import paths).
"""

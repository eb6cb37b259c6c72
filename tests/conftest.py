"""Suite-wide settings: Hypothesis runs without per-example deadlines on shared, noisy machines.

Builders and Hypothesis strategies shared by test files live in ``tests/support``.
"""

from __future__ import annotations

import os

from hypothesis import settings

# Timing belongs in the benchmarks, not in tests: a slow example on a busy CI machine is not a
# failure. CI also prints the seed blob of any failure so it can be reproduced locally.
settings.register_profile("pev", deadline=None, print_blob=True)
settings.register_profile("ci", deadline=None, print_blob=True, derandomize=True)
settings.load_profile("ci" if os.environ.get("CI") == "true" else "pev")

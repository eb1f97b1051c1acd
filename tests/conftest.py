"""Settings of the whole suite: no hypothesis example is held to a wall-clock bound.

Tests assert order and causality, never a time a loaded machine can miss. hypothesis's default
deadline (200 ms per example; for a state machine, per run of all its steps) and its
``too_slow`` health check are such bounds, so the ``podcache`` profile turns both off. It is
loaded here, before any test module is imported, so it also holds for the ``settings(...)``
objects those modules make at import (they take unset values from the profile loaded then).
"""

from hypothesis import HealthCheck, settings

settings.register_profile("podcache", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("podcache")

"""The suite's hypothesis profile (tests/conftest.py) holds for settings made at import."""

from hypothesis import HealthCheck, settings

import tests.unit.cache.test_model_stateful as stateful

MADE_AT_IMPORT = settings(max_examples=5)


def test_settings_made_at_import_have_no_deadline_and_allow_slow_data() -> None:
    default = settings.default
    assert default is not None
    made_by_a_module = stateful.TestRuntimeCacheAgainstGoModel.settings
    for made in (MADE_AT_IMPORT, made_by_a_module, default):
        assert made.deadline is None
        assert HealthCheck.too_slow in made.suppress_health_check

"""Suite-wide settings. The ``backend`` / ``xp`` fixtures come from arrayrope's pytest plugin.

The plugin (the top-level module ``_arrayrope_pytest``, entry point ``pytest11``) runs
every test that takes them on every installed backend; ``ARRAYROPE_BACKENDS=numpy,torch``
narrows the set, and a missing library is a skipped parameter with the reason.
"""

from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("ci", max_examples=30, deadline=None, derandomize=True)
settings.register_profile("dev", max_examples=60, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def pytest_configure(config):
    # Installed arrayrope registers the plugin itself; a checkout whose metadata predates it loads it here.
    if not config.pluginmanager.has_plugin("arrayrope"):
        config.pluginmanager.import_plugin("_arrayrope_pytest")

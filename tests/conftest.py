"""The ``backend`` / ``xp`` fixtures: every test that takes them runs on every installed backend.

Backends come from :func:`arrayrope.testing.backends` (capabilities declared once there);
``ARRAYROPE_BACKENDS=numpy,torch`` narrows the set. A missing library is a skipped
parameter with the reason, so the test report shows what did not run.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import settings

from arrayrope.testing import backends

settings.register_profile("ci", max_examples=30, deadline=None, derandomize=True)
settings.register_profile("dev", max_examples=60, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

_FOUND, _MISSING = backends(with_reasons=True)
_PARAMS = [pytest.param(b, id=b.name) for b in _FOUND] + [
    pytest.param(None, id=name, marks=pytest.mark.skip(reason=reason)) for name, reason in _MISSING.items()
]


@pytest.fixture(params=_PARAMS)
def backend(request):
    """One :class:`arrayrope.testing.Backend` (library, namespace, device, dtypes)."""
    return request.param


@pytest.fixture
def xp(backend):
    return backend.xp

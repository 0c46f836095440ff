"""The pytest plugin under its former name; it lives in the top-level module ``_arrayrope_pytest``.

pytest loads the plugin (entry point ``pytest11``) in every run of every project that
has arrayrope installed, so it sits outside this package: loading it imports neither
arrayrope nor NumPy until a test asks for the ``backend`` or ``xp`` fixture.
"""

from _arrayrope_pytest import backend, backend_params, pytest_generate_tests, xp

__all__ = ["backend", "backend_params", "pytest_generate_tests", "xp"]

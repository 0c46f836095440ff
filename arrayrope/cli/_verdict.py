"""The verdict of a command that checks something, and its exit status: one rule for every such command.

The verdict line says the word of ``Report.status``, ``verdict: <word>: ...``, and the
word gives the exit status. 0 ``verified``: numeric checks ran and every one agreed.
1 ``failed``: a numeric check ran and disagreed. 3 ``not verified``: nothing numeric
could run here, or something the command line named (a backend, a provider) could
not run; the verdict lists what ran and what did not. 2 is a usage or input error
(one line on stderr), with no verdict.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any, TextIO

OK, FAILED, USAGE, NOT_VERIFIED = 0, 1, 2, 3

EPILOG = """\
exit status, and the word of the verdict line ('verdict: <word>: ...'):
  0  verified: numeric checks ran and every one agreed
  1  failed: a numeric check ran and disagreed
  2  usage or input error (one line on stderr: 'arrayrope {command}: error: ...')
  3  not verified: nothing numeric could run here, or something named on the
     command line could not run; the verdict says what ran and what did not"""


def epilog(command: str) -> str:
    """The exit statuses, for the ``--help`` of ``command``."""
    return EPILOG.format(command=command)


def conclude(
    report: Any,
    *,
    missing: Sequence[tuple[str, str]] = (),
    out: TextIO | None = None,
) -> int:
    """Print ``verdict: <status>: ...`` for ``report`` and return the exit status.

    The status is a word of ``Report.status``: ``verified`` (exit status 0), ``failed``
    (1) or ``not verified`` (3). ``missing`` lists ``(what, why)`` for things the
    command line asked for that could not run, which make a report that agrees anyway
    "not verified".
    """
    out = out or sys.stdout
    status = report.status
    detail = report.verdict()
    detail = detail.split(": ", 1)[1]
    if status != "failed" and missing:
        asked = "; ".join(f"{what} could not run here ({why})" for what, why in missing)
        detail = f"{asked}; what ran: {detail}" if status == "verified" else f"{asked}; {detail}"
        status = "not verified"
    print(f"verdict: {status}: {detail}", file=out)
    return {"verified": OK, "failed": FAILED, "not verified": NOT_VERIFIED}[status]

"""The fabric on Mininet: nodes, links, the fork server, clean-up.

Mininet's ``node.py`` imports ``distutils.version`` (to compare OVS
versions). Under setuptools' distutils shim (the venv's
``distutils-precedence.pth`` puts a finder on ``sys.meta_path``) that import
loads setuptools and ``pkg_resources``: 0.1 s of every run's start, for a
class the emulator never uses. Python < 3.12 still has the standard
library's distutils (Debian: python3-distutils, which Mininet's package
brings); it is imported here, past the shim, before Mininet is.
"""
from __future__ import annotations

import sys
import warnings

if sys.version_info < (3, 12) and "distutils" not in sys.modules:
    _shims = [f for f in sys.meta_path if type(f).__name__ == "DistutilsMetaFinder"]
    for _f in _shims:
        sys.meta_path.remove(_f)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)   # "distutils is deprecated"
            import distutils.version  # noqa: F401
    except ImportError:      # no standard distutils here: Mininet's import takes the shim's
        pass
    finally:
        sys.meta_path[0:0] = _shims

# Mininet's log module installs its logger class for every logger created
# after it (``logging.setLoggerClass``): each such logger gets a handler of
# its own that drops the line's newline, so the emulator's warnings (a
# controller that lost primary, at the mininet> prompt) would run into the
# next line. Mininet's own ``lg`` is made at that import; the class is put
# back for everyone else's.
try:
    import logging

    import mininet.log  # noqa: F401
    logging.setLoggerClass(logging.Logger)
except ImportError:          # no Mininet: nothing installed its class
    pass

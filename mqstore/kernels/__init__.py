"""mqstore's compiled core: Cython kernels for the per-record loops (issue 15).

The kernels are compiled from the ``.pyx`` files next to this one when the package is
installed (``setup.py``; ``pip install -e .`` or ``pip install .``, which needs a C
compiler and zlib's headers). There is no pure-Python fallback in production: if the
extension is missing, importing this package fails with an ImportError saying how to
build it. The numpy/Python versions the kernels replaced live in ``tests/kernels/`` as
reference models, which differential tests hold the kernels to.
"""

from __future__ import annotations

import os

BUILD_HINT = (
    "mqstore's compiled core (the Cython extensions mqstore.kernels._scan, _dispatch, _encode, _verify, _decode, _queues, _intern, _files, _probe) is not built. "
    "Build it from the clone with `pip install -e .` (or install the package with `pip install .`); "
    "this needs a C compiler and zlib's headers (Debian/Ubuntu: apt-get install build-essential zlib1g-dev)."
)

try:
    from mqstore.kernels import _decode, _dispatch, _encode, _files, _intern, _probe, _queues, _scan, _verify  # noqa: F401 - each is imported where it is used
except ImportError as e:  # no silent fallback: say how to build it
    raise ImportError(f"{BUILD_HINT} ({e})") from e


_KERNELS = (_decode, _dispatch, _encode, _files, _intern, _probe, _queues, _scan, _verify)


def core_status() -> str:
    """``"loaded, _decode _dispatch ... from <their directory>"``: what ``mqstore
    --version`` reports (each extension named, so a stale or partial build shows)."""
    names = " ".join(k.__name__.rsplit(".", 1)[1] for k in _KERNELS)
    dirs = sorted({os.path.dirname(k.__file__) for k in _KERNELS})
    return f"loaded, {names} from {', '.join(dirs)}"


__all__ = ["BUILD_HINT", "core_status"]

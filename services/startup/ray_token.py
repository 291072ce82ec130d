"""Ray's token file, ``~/.ray/auth_token``, readable by its user only, whatever the umask.

A local Ray instance in token mode makes the file when it is missing, but writes it
under the process's umask: 0644 under the usual 022, so every local user could read
the token that lets a driver run code. ``serve`` makes the file itself first, with
mode 0600 (Ray then finds it and uses it), and narrows a file an earlier run left
readable by others. A token the environment names (``RAY_AUTH_TOKEN``,
``RAY_AUTH_TOKEN_PATH``) is the user's to guard; only the default file is made here.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import structlog

log = structlog.get_logger(__name__)

PRIVATE_MODE = 0o600


def default_token_path() -> Path:
    """Where Ray looks when the environment names no token (its _get_default_token_path)."""
    return Path.home() / ".ray" / "auth_token"


def make_token_private(path: Path | None = None) -> Path:
    """Make ``path`` (default ``~/.ray/auth_token``) exist with mode 0600 unless the
    environment gives Ray its token, and narrow it to 0600 if it is readable or
    writable by anyone else. Returns the path. Call before a local Ray instance
    starts, and again after (in case Ray wrote it)."""
    path = path or default_token_path()
    given = os.environ.get("RAY_AUTH_TOKEN") or os.environ.get("RAY_AUTH_TOKEN_PATH")
    if not given and not path.exists():
        from ray._private.authentication.authentication_token_generator import generate_new_authentication_token

        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_MODE)  # 0600 under any umask
        except FileExistsError:  # another serve made it meanwhile: narrowed below
            pass
        else:
            with os.fdopen(fd, "w") as f:
                f.write(generate_new_authentication_token())
                f.flush()
                os.fsync(f.fileno())
            log.info("ray_token_created", path=str(path), mode=oct(PRIVATE_MODE))
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        return path
    if mode & 0o077:
        os.chmod(path, PRIVATE_MODE)
        log.warning("ray_token_mode_narrowed", path=str(path), was=oct(mode), now=oct(PRIVATE_MODE))
    return path


__all__ = ["PRIVATE_MODE", "default_token_path", "make_token_private"]

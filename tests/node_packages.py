"""A test folder's locked Node packages, whole.

``scripts/_env.sh`` installs them before any test runs (``npm ci``, then a stamp holding the
lock's hash). A fixture asks here, so that pytest run on its own works too: a folder whose stamp
does not match its lock (never installed, a changed lock, or a tree an interrupted install left
half-written, which a check for one package's folder would take for whole) is installed again.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

STAMP = Path("node_modules") / ".omni-lock.sha256"  # the name scripts/_env.sh writes


def installed(folder: Path) -> Path:
    """``folder``, with the packages of its package-lock.json installed whole."""
    assert shutil.which("node") and shutil.which("npm"), "this test needs Node 20 and npm"
    want = hashlib.sha256((folder / "package-lock.json").read_bytes()).hexdigest()
    stamp = folder / STAMP
    if not stamp.is_file() or stamp.read_text().strip() != want:
        subprocess.run(
            ["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"],
            cwd=folder,
            check=True,
            timeout=300,
        )
        stamp.write_text(want + "\n")
    return folder

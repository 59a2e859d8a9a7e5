"""cfn-lint, as the infra and e2e tiers run it on synthesized templates."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest


def command() -> list[str]:
    exe = Path(sys.executable).with_name("cfn-lint")
    if exe.exists():
        return [str(exe)]
    found = shutil.which("cfn-lint")
    if not found:
        pytest.fail("cfn-lint is not installed (pip install -e '.[infra]')")
    return [found]


def errors(*template_files: Path) -> list[dict[str, Any]]:
    """cfn-lint's matches of level Error in these templates."""
    result = subprocess.run(
        [*command(), "--format", "json", *map(str, template_files)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    return [m for m in json.loads(result.stdout or "[]") if m["Level"] == "Error"]

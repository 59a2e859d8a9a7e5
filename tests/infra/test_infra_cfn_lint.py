"""cfn-lint on every synthesized template: no errors (warnings are printed)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.support import cfn_lint

pytestmark = pytest.mark.slow


def test_templates_pass_cfn_lint(synth) -> None:
    files = [str(synth.outdir / f"{name}.template.json") for name in synth.stacks]
    result = subprocess.run(
        [*cfn_lint.command(), "--format", "json", *files], capture_output=True, text=True, timeout=300
    )
    assert result.stdout.strip(), result.stderr
    matches = json.loads(result.stdout)
    errors = []
    for m in matches:
        line = f"{m['Level']} {m['Rule']['Id']} {Path(m['Filename']).name} {'/'.join(map(str, m['Location']['Path']))}: {m['Message']}"
        print(line)
        if m["Level"] == "Error":
            errors.append(line)
    assert errors == [], "\n".join(errors)

"""The README stays a ten-minute read, every link in the README and docs/ lands, and the configuration
reference is the one the code generates (issue 30)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from flightdeck import config_reference

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
PAGES = [README, *DOCS]

README_MAX_LINES = 300
# A `##` section of the README (its subsections included), in lines: the detail belongs in docs/.
SECTION_BUDGET = 80

LINK = re.compile(r"(?<!\!)\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^)\s]+)\)")


def _outside_fences(text: str) -> list[str]:
    lines, fence = [], False
    for line in text.split("\n"):
        if line.startswith("```"):
            fence = not fence
            continue
        if not fence:
            lines.append(line)
    return lines


def anchors(path: Path) -> set[str]:
    """GitHub's anchors of a page's headings (a repeated heading gets -1, -2...)."""
    seen: dict[str, int] = {}
    out = set()
    for line in _outside_fences(path.read_text(encoding="utf-8")):
        m = re.match(r"^#{1,6} (.*)$", line)
        if not m:
            continue
        base = config_reference.slug(m.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def links(path: Path) -> list[str]:
    text = "\n".join(_outside_fences(path.read_text(encoding="utf-8")))
    text = re.sub(r"`[^`\n]*`", lambda m: "" if "](" not in m.group(0) else m.group(0), text)
    return LINK.findall(text)


def test_slug_is_githubs() -> None:
    assert config_reference.slug("Asking for input (input-required)") == "asking-for-input-input-required"
    assert config_reference.slug("`flightdeck chat`") == "flightdeck-chat"
    assert config_reference.slug("An agent with an MCP server's tools") == "an-agent-with-an-mcp-servers-tools"
    assert config_reference.slug("2. Data layout and invariants") == "2-data-layout-and-invariants"
    assert config_reference.slug("`[[agents.NAME.mcp_servers]]`") == "agentsnamemcp_servers"


def test_readme_is_a_ten_minute_read() -> None:
    lines = README.read_text(encoding="utf-8").split("\n")
    assert len(lines) <= README_MAX_LINES, (
        f"README.md has {len(lines)} lines (at most {README_MAX_LINES}): move detail to docs/"
    )


def test_readme_sections_keep_their_budget() -> None:
    lines = README.read_text(encoding="utf-8").split("\n")
    starts, fence = [], False
    for i, line in enumerate(lines):
        if line.startswith("```"):
            fence = not fence
        elif not fence and line.startswith("## "):
            starts.append(i)
    over = []
    for k, start in enumerate(starts):
        end = starts[k + 1] if k + 1 < len(starts) else len(lines)
        if end - start > SECTION_BUDGET:
            over.append(f"{lines[start]!r}: {end - start} lines")
    assert not over, f"README sections over {SECTION_BUDGET} lines (move detail to docs/): {over}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_links_land(page: Path) -> None:
    broken = []
    for target in links(page):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):
            broken.append(f"{target}: links outside the repository")
            continue
        file_part, _, anchor = target.partition("#")
        dest = (page.parent / file_part).resolve() if file_part else page
        if ROOT not in dest.parents and dest != ROOT:
            broken.append(f"{target}: outside the repository")
        elif not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading with anchor #{anchor} in {dest.relative_to(ROOT)}")
    assert not broken, f"{page.relative_to(ROOT)}: " + "; ".join(broken)


def test_readme_links_into_docs_for_the_detail() -> None:
    targets = {t.partition("#")[0] for t in links(README)}
    expected = {
        "docs/API.md",
        "docs/CONFIGURATION.md",
        "docs/CHAT.md",
        "docs/STREAMING.md",
        "docs/PEERS.md",
        "docs/A2A.md",
        "docs/MCP.md",
        "docs/SKILLS.md",
        "docs/DEPLOYMENT.md",
        "docs/PERFORMANCE.md",
        "docs/ARCHITECTURE.md",
        "docs/DEVELOPMENT.md",
    }
    assert expected <= targets, f"the README's map misses {sorted(expected - targets)}"


def test_configuration_reference_is_generated() -> None:
    committed = (ROOT / "docs" / "CONFIGURATION.md").read_text(encoding="utf-8")
    assert committed == config_reference.render(), (
        "docs/CONFIGURATION.md differs from the models: "
        "run `.venv/bin/python -m flightdeck.config_reference > docs/CONFIGURATION.md`"
    )


def test_every_key_and_setting_is_in_the_reference() -> None:
    from flightdeck.config_models import AgentSpec, DeploySection, GatewaySection
    from flightdeck.domain.agent import DelegateTool, McpServer, ModelConfig
    from flightdeck.domain.skills.contract import Skill
    from flightdeck.settings import Settings

    page = config_reference.render()
    for model in (AgentSpec, DeploySection, GatewaySection, DelegateTool, McpServer, ModelConfig, Skill):
        for name in model.model_fields:
            assert f"| `{name}` |" in page, f"{model.__name__}.{name} is not in the reference"
    for field in Settings.model_fields.values():
        assert f"| `{field.alias}` |" in page, f"{field.alias} is not in the reference"


def test_a_field_without_a_description_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    from flightdeck.domain.agent import ModelConfig

    monkeypatch.setattr(ModelConfig.model_fields["max_tokens"], "description", None)
    with pytest.raises(ValueError, match="max_tokens has no description"):
        config_reference.render()

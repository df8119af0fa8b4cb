"""Every link in the project's documentation resolves inside the repository.

A link to a file outside the repository (say ``../elsewhere/SPEC.md``) works
in one checkout and is broken in every user's clone; so is a link to a file
or heading that does not exist. This checks every Markdown file of the
repository: relative links must name an existing path inside it, and a
``#heading`` must be one of the target's headings (GitHub's anchors).
"""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_SKIP_DIRS = {".git", ".venv", "build", "dist", "node_modules", ".hypothesis", ".pytest_cache"}
# [text](target) and [text](target "title"); images too. Code spans and
# fenced code are removed first.
_LINK = re.compile(r"\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$", re.M)
_FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)
_CODE_SPAN = re.compile(r"`[^`\n]*`")


def markdown_files() -> list[Path]:
    found = []
    for path in ROOT.rglob("*.md"):
        parts = path.relative_to(ROOT).parts
        if any(part in _SKIP_DIRS or part.endswith(".egg-info") for part in parts):
            continue
        found.append(path)
    return sorted(found)


def links(text: str) -> list[str]:
    # A link's text may be a code span ([`docs/`](docs/)): dropping code
    # spans keeps its target, and drops link syntax quoted as code.
    text = _CODE_SPAN.sub("", _FENCE.sub("", text))
    return _LINK.findall(text) + _REFERENCE.findall(text)


def anchors(path: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to -."""
    text = _FENCE.sub("", path.read_text(encoding="utf-8"))
    found = set()
    for heading in re.findall(r"^#{1,6}\s+(.*?)\s*#*\s*$", text, re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        found.add(slug)
    return found


def problems_in(path: Path) -> list[str]:
    problems = []
    for target in links(path.read_text(encoding="utf-8")):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # https:, mailto:
            if not target.lower().startswith(("http://", "https://", "mailto:")):
                problems.append(f"{target}: not a web link nor a path in the repository")
            continue
        file_part, _, anchor = target.partition("#")
        resolved = (path.parent / file_part).resolve() if file_part else path
        if not resolved.is_relative_to(ROOT):
            problems.append(f"{target}: outside the repository")
            continue
        if not resolved.exists():
            problems.append(f"{target}: no such file in the repository")
            continue
        if anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            problems.append(f"{target}: {resolved.relative_to(ROOT)} has no heading #{anchor}")
    return problems


def test_the_documentation_is_found():
    names = {path.relative_to(ROOT).as_posix() for path in markdown_files()}
    assert {"README.md", "docs/contract.md", "docs/configuration.md",
            "docs/guarantees.md"} <= names


@pytest.mark.parametrize("path", markdown_files(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_link_resolves_inside_the_repository(path):
    assert problems_in(path) == []


def test_the_checker_finds_broken_links(monkeypatch):
    page = ROOT / "docs" / "contract.md"
    text = ("[a](../../outside/SPEC.md) [b](missing.md) [c](contract.md#no-such-heading) "
            "[d](contract.md#manifestjson) [e](https://example.com) [f](ftp://x) "
            "`[g](../../ignored.md)`\n\n[ref]: ../../elsewhere.md\n")
    fake = page.with_name("_links_probe.md")
    monkeypatch.setattr(Path, "read_text",
                        lambda self, *a, **k: text if self == fake else
                        Path.read_bytes(self).decode("utf-8"))
    found = problems_in(fake)
    assert [problem.split(":")[0] for problem in found] == [
        "../../outside/SPEC.md", "missing.md", "contract.md#no-such-heading", "ftp",
        "../../elsewhere.md"]

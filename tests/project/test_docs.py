"""The README and docs/ as a reader meets them: short enough, no dead link, no broken table.

Plain text checks, no build and no server: they run in milliseconds under ``make check`` too. The tensor table is
read against the contract module (``tritongen.contract``).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").rglob("*.md"))
PAGES = [README, *DOCS]
README_MAX_LINES = 300

FENCE = re.compile(r"^\s*(```|~~~)")
INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1")
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
DELIMITER_CELL = re.compile(r"^\s*:?-+:?\s*$")


def _prose(path: Path) -> list[tuple[int, str]]:
    """The page's lines outside fenced code blocks, numbered from 1."""
    lines, fenced = [], False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            lines.append((number, line))
    return lines


def _links(path: Path) -> list[tuple[int, str]]:
    """Relative link targets (``docs/x.md``, ``../README.md``), with their line: no URL, mailto or in-page anchor."""
    found = []
    for number, line in _prose(path):
        for target in LINK.findall(INLINE_CODE.sub("code", line)):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE) or target.startswith("#"):
                continue  # http(s), mailto, ...; an anchor of this page
            found.append((number, target.split("#", 1)[0]))
    return found


def _cells(row: str) -> list[str]:
    """A table row's cells as GitHub splits them: on every pipe but an escaped one (``\\|``).

    A pipe inside backticks splits the cell too (GitHub's tables are split before code spans are read), so a
    literal pipe in a table is always written ``\\|``, in code or not.
    """
    row = row.strip()
    row = row[1:] if row.startswith("|") else row
    row = row[:-1] if row.endswith("|") and not row.endswith("\\|") else row
    return re.split(r"(?<!\\)\|", row)


def _tables(path: Path) -> list[tuple[int, int, list[tuple[int, str]]]]:
    """Each table as (line of its header, header cells, its body rows with their lines)."""
    lines, tables, i = _prose(path), [], 0
    while i + 1 < len(lines):
        (number, header), (_, delimiter) = lines[i], lines[i + 1]
        if header.lstrip().startswith("|") and all(DELIMITER_CELL.match(c) for c in _cells(delimiter)):
            rows, i = [], i + 2
            while i < len(lines) and lines[i][1].lstrip().startswith("|"):
                rows.append(lines[i])
                i += 1
            tables.append((number, len(_cells(header)), rows))
        else:
            i += 1
    return tables


def _name(path: Path) -> str:
    return str(path.relative_to(ROOT))


def test_readme_fits_when_read_in_five_minutes():
    count = len(README.read_text(encoding="utf-8").splitlines())
    assert count <= README_MAX_LINES, f"README.md has {count} lines (at most {README_MAX_LINES}): move detail to docs/"


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_relative_links_resolve_when_page_is_read(page: Path):
    dead = [
        f"{_name(page)}:{number}: {target}"
        for number, target in _links(page)
        if target and not (page.parent / target).exists()
    ]
    assert not dead, "links to files that do not exist:\n" + "\n".join(dead)


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_table_rows_match_header_when_page_is_rendered(page: Path):
    broken = [
        f"{_name(page)}:{number}: {len(_cells(row))} cells, the header at line {header_line} has {width}"
        for header_line, width, rows in _tables(page)
        for number, row in rows
        if len(_cells(row)) != width
    ]
    assert not broken, "table rows whose cell count differs from the header's (a pipe in text is written \\|):\n" + (
        "\n".join(broken)
    )


def test_docs_pages_found_when_collected():
    assert (ROOT / "docs" / "benchmarks.md") in DOCS, "docs/ pages are collected from the repository root"


def test_cells_split_when_pipes_are_escaped_or_in_code():
    assert _cells("| `a\\|b` | c |") == [" `a\\|b` ", " c "]
    assert _cells("| `a|b` | c |") == [" `a", "b` ", " c "]


def test_links_skip_urls_and_code_when_page_is_scanned(tmp_path: Path):
    page = tmp_path / "page.md"
    page.write_text(
        "[a](x.md#part) [b](https://example.com) [c](#here) [d](mailto:a@b.c) `[e](in-code.md)`\n"
        '```\n[f](in-fence.md)\n```\n![g](img.png "title")\n',
        encoding="utf-8",
    )
    assert _links(page) == [(1, "x.md"), (5, "img.png")]


def test_tensor_table_of_tasks_md_types_every_public_tensor_as_the_contract_does():
    """docs/tasks.md's table of the ensembles' tensors: each public tensor once at least, typed as in the contract."""
    from tritongen.contract import PUBLIC

    rows = [line for _, line in _prose(ROOT / "docs" / "tasks.md") if line.startswith("| `")]
    typed: dict[str, set[str]] = {}
    for row in rows:
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        types = re.findall(r"TYPE_[A-Z0-9]+", cells[1]) if len(cells) > 1 else []
        names = re.findall(r"`([A-Z_]+)`", cells[0])
        for index, name in enumerate(names):
            if types:
                typed.setdefault(name, set()).add(types[min(index, len(types) - 1)])
    assert set(PUBLIC) <= set(typed), sorted(set(PUBLIC) - set(typed))
    assert {name: PUBLIC[name].data_type for name in PUBLIC if typed[name] != {PUBLIC[name].data_type}} == {}


def test_architecture_page_names_only_paths_that_exist_and_every_folder_of_the_package():
    """docs/architecture.md's tree: each folder and the files it names exist; each package folder is named."""
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    package = ROOT / "tritongen"
    tree = text.split("```")[1]
    folder, missing, named = None, [], set()
    for line in tree.splitlines()[2:]:
        head = re.match(r"^  (\S+)", line)
        if head:
            folder = head.group(1)
            named.add(folder.rstrip("/"))
            if not (package / folder).exists():
                missing.append(folder)
        for name in re.findall(r"\b([a-z_]+\.py)\b", line):
            where = package / folder if folder and folder.endswith("/") else package
            if not list(where.rglob(name)):
                missing.append(f"{folder}{name}")
    for path in re.findall(r"`((?:tritongen/)?[a-z_]+/[a-z_<>/.]*\.py)`", text):
        pattern = path.replace("<runtime>", "*").replace("<task>", "*")
        base = ROOT if pattern.startswith(("tests/", "tritongen/")) else package
        if not list(base.glob(pattern)):
            missing.append(path)
    folders = {p.name for p in package.iterdir() if p.is_dir() and not p.name.startswith("__")}
    assert missing == []
    assert folders <= named, sorted(folders - named)

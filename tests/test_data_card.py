"""The data card data/README.md stays in step with the asset registry (layersim.inputs.assets): a check of the
repository's documentation, not of the library, so it sits at the top of tests/ rather than in tests/inputs/.

Its assets table has one row per asset, the asset's registry name in backticks in the first column and
"<kind>, <scale>" in the second. An asset added to the registry without a row fails, and so does a row
left behind for an asset that was removed or renamed; the sizes the registry holds are the card's. The card is the
one file of data/ that git tracks.
"""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from layersim.inputs import assets

from builders import REPO

CARD = REPO / "data" / "README.md"
NAMES = [a.name for a in assets.list_assets()]


def _cells(line: str) -> list[str]:
    """The cells of one Markdown table line ``| a | b |``, stripped."""
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _asset_rows() -> list[list[str]]:
    """The body rows of the card's assets table: the table whose header starts with ``asset``."""
    rows: list[list[str]] | None = None
    for line in CARD.read_text(encoding="utf-8").splitlines():
        is_row = line.lstrip().startswith("|")
        if rows is None:
            if is_row and _cells(line)[0].lower() == "asset":
                rows = []
            continue
        if not is_row:
            break
        cells = _cells(line)
        if all(set(c) <= set("-: ") for c in cells):  # the |---|---| separator
            continue
        rows.append(cells)
    assert rows is not None, f"{CARD} has no assets table (a table whose first header cell is 'asset')"
    return rows


def _row_names() -> list[str]:
    """The asset named in each row: the first cell, exactly one name in backticks."""
    names = []
    for cells in _asset_rows():
        match = re.fullmatch(r"`([^`]+)`", cells[0])
        assert match, f"assets table row must start with `<asset name>`, got {cells[0]!r}"
        names.append(match[1])
    return names


def test_card_has_an_assets_table():
    assert CARD.is_file(), f"{CARD} is missing"
    assert _asset_rows(), "the assets table has no rows"


@pytest.mark.parametrize("name", NAMES)
def test_every_asset_has_a_row(name):
    assert name in _row_names(), (
        f"asset {name!r} is in layersim.inputs.assets.list_assets() but has no row in data/README.md: "
        "add one (what it is, sources, licence, size, notebooks, where it lands)")


def test_every_row_names_an_existing_asset():
    stale = [n for n in _row_names() if n not in NAMES]
    assert not stale, (f"data/README.md has rows for assets the registry does not know: {stale} "
                       "(removed or renamed? use the registry name, not an alias)")


def test_each_asset_has_one_row():
    names = _row_names()
    twice = sorted({n for n in names if names.count(n) > 1})
    assert not twice, f"assets with more than one row: {twice}"


def test_rows_give_kind_and_scale_of_the_registry():
    for cells in _asset_rows():
        name = cells[0].strip("`")
        if name not in assets.ASSETS:
            continue  # reported by test_every_row_names_an_existing_asset
        asset = assets.ASSETS[name]
        assert len(cells) > 1 and cells[1] == f"{asset.kind}, {asset.scale}", (
            f"row {name!r}: second column is {cells[1] if len(cells) > 1 else None!r}, "
            f"the registry says '{asset.kind}, {asset.scale}'")


_SIZE = re.compile(r"(\d+(?:\.\d+)?) (kB|MB|GB)\b")
_UNIT = {"kB": 10**3, "MB": 10**6, "GB": 10**9}


def test_the_registrys_sizes_are_the_cards():
    """``Asset.size_bytes`` is the first size of the row's "size on disk" column (1 MB = 10⁶ B), and None where the
    row states none ("not measured")."""
    for cells in _asset_rows():
        name = cells[0].strip("`")
        if name not in assets.ASSETS:
            continue
        found = _SIZE.search(cells[6])
        card = None if found is None else round(float(found[1]) * _UNIT[found[2]])
        assert assets.ASSETS[name].size_bytes == card, (
            f"row {name!r}: the card gives {found[0] if found else 'no size'} ({cells[6]!r}), the registry's "
            f"size_bytes is {assets.ASSETS[name].size_bytes}")


@pytest.mark.skipif(shutil.which("git") is None or not (REPO / ".git").exists(), reason="needs a git checkout")
def test_card_is_tracked_and_the_rest_of_data_ignored():
    def ignored(path: str) -> bool:
        run = subprocess.run(["git", "check-ignore", "-q", "--no-index", path], cwd=REPO, check=False)
        assert run.returncode in (0, 1), f"git check-ignore failed on {path}"
        return run.returncode == 0

    assert not ignored("data/README.md"), ".gitignore ignores data/README.md: a fresh clone would lack the card"
    for path in ("data/cache/checkpoints/x/model.safetensors", "data/system/.provisioned", "data/imagenet/val"):
        assert ignored(path), f".gitignore does not ignore {path}"


def layersim_names(script: str) -> list[str]:
    """``module.attribute`` of every call into layersim in the Python here-documents of a shell ``script``."""
    import ast

    found = []
    for block in re.findall(r"<<'EOF'[^\n]*\n(.*?)\nEOF\n", script, re.S):
        tree = ast.parse(block)
        modules = {alias.asname or alias.name: f"{node.module}.{alias.name}" for node in ast.walk(tree)
                   if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("layersim")
                   for alias in node.names}
        found += [f"{modules[n.value.id]}.{n.attr}" for n in ast.walk(tree)
                  if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id in modules]
    return found


def test_the_provisioning_script_calls_functions_that_exist():
    """``make setup`` warms the cache through Python in scripts/provision.sh, whose failure is only one "failed"
    line: every layersim function it calls must exist."""
    import importlib

    names = layersim_names((REPO / "scripts" / "provision.sh").read_text())
    assert "layersim.inputs.image_data.load_fashion_mnist" in names
    missing = [n for n in names if not hasattr(importlib.import_module(n.rpartition(".")[0]), n.rpartition(".")[2])]
    assert not missing, f"scripts/provision.sh calls names that do not exist: {missing}"


def test_the_script_reader_finds_a_call_that_does_not_exist():
    script = "x() {\n  python - <<'EOF' >>log\nfrom layersim.inputs import data\ndata.load_nothing()\nEOF\n}\n"
    assert layersim_names(script) == ["layersim.inputs.data.load_nothing"]

"""Tests of layersim.tools.assets: what each notebook needs, read from its settings cell (and agreeing with the data
card), fetching ahead with the downloads stubbed (a manifest of sha256s), and the checks before a paper-scale run
(assets, GPU memory, disk), on a registry stand-in and a private cache. Nothing reaches the network."""

import hashlib
import json
import re
import urllib.request

import nbformat
import pytest

from layersim.inputs import assets, fetch
from layersim.notebook import presets
from layersim.tools import assets as tool, runner
from builders import REPO, one_line_error, write_notebook

NOTEBOOKS = sorted(p for p in REPO.glob("notebooks/*/*.ipynb")
                   if "start(" in "".join(c.source for c in nbformat.read(p, as_version=4).cells))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_notebooks_presets_are_read_from_the_notebook(path):
    got = tool.notebook_presets(path.stem)
    assert {"smoke", "default", "paper"} <= set(got), path.stem


def test_presets_are_read_without_jupyter(monkeypatch):
    """A GPU machine or batch node may lack IPython: the settings cell's display import is left out."""
    import sys

    monkeypatch.setitem(sys.modules, "IPython", None)  # any import of IPython now raises ImportError
    monkeypatch.setitem(sys.modules, "IPython.display", None)
    with pytest.raises(ImportError):
        import IPython.display  # noqa: F401
    assert tool.notebook_presets("t10_aligned_gpt")["paper"]["pretrained"] == "gpt2"
    assert tool.notebook_assets("paper", [REPO / "notebooks/tracing/t10_aligned_gpt.ipynb"]) == {
        "t10_aligned_gpt": ["gpt2", "wikitext-103"]}


def test_presets_shared_with_the_library_are_the_librarys_own_object():
    assert tool.notebook_presets("c03_layer_skipping") is presets.CLUSTERS_FINETUNE
    with pytest.raises(ValueError, match="no notebook"):
        tool.notebook_presets("t99_nothing")


# ----------------------------------------------------------------------------- what each notebook needs


def _card_users() -> tuple[dict[str, set[str]], str]:
    """``{asset: {"a01", ...}}`` from the "paper:" part of each row's notebooks column, and the card's text."""
    from test_data_card import CARD, _asset_rows

    users = {}
    for cells in _asset_rows():
        part = next((p for p in cells[7].split(";") if p.strip().startswith("paper:")), "")
        found = set()
        for letter, first, last in re.findall(r"\b([acrt])(\d\d)(?:–[acrt](\d\d))?\b", part):
            found |= {f"{letter}{i:02d}" for i in range(int(first), int(last or first) + 1)}
        found |= set(re.findall(r"\blayer_report\b", part))  # the one notebook without a number
        users[cells[0].strip("`")] = found
    return users, CARD.read_text(encoding="utf-8")


def test_the_paper_scales_assets_are_the_data_cards_users():
    """Every registry asset's "paper:" notebooks on the data card are the notebooks whose settings name it, and the
    card's sentence on torchvision's ImageNet weights names the notebooks whose settings ask for them."""
    card, text = _card_users()
    derived: dict[str, set[str]] = {name: set() for name in card}
    weights = set()
    for stem, names in tool.notebook_assets("paper").items():
        for name in names:
            if name.startswith(tool.WEIGHTS):
                weights.add(stem[:3])
            else:
                derived[assets.split_name(name)[0].name].add(stem[:3] if re.fullmatch(r"[acrt]\d\d", stem[:3]) else stem)
    wrong = {n: (sorted(card[n]), sorted(derived[n])) for n in card if card[n] != derived[n]}
    assert not wrong, f"data card's paper notebooks vs the settings cells' (card, settings): {wrong}"
    sentence = re.search(r"torchvision's ImageNet weights for ResNet/VGG at paper scale \(([^;]*);", text)
    assert sentence and set(re.findall(r"[acrt]\d\d", sentence[1])) == weights == {"a08", "a10"}


@pytest.mark.parametrize("value,expected", [
    ({"dataset": "cifar10", "n_eval": 10}, ["cifar10"]),
    ({"tasks": {"cifar10": [1, 1], "diabetes": [1, 1]}, "models": ["gpt2", "nosuch"]}, ["cifar10", "gpt2"]),
    ({"tasks": ["sst2", "boolq"]}, ["glue/sst2", "boolq"]),
    ({"ARCH": {"gpt2": "gpt2"}, "names": ["deit_small"], "HARD": {"cifar10": ["cat"]}}, []),  # not settings of data
    ({"dataset": "imagenet", "arch": "resnet18", "weights": "IMAGENET1K_V1"}, ["torchvision:resnet18.IMAGENET1K_V1"]),
    ({"dataset": "imagenet", "arch": "resnet18", "weights": None}, ["imagenet"]),
    ({"shifts": {"CIFAR-10.2": {"dataset": "cifar10.2"}}}, ["cifar10.2"]),
])
def test_settings_name_assets_under_their_keys_only(value, expected):
    found: dict = {}
    tool._named(value, None, found)
    assert list(found) == expected


def test_a_notebooks_assets_follow_its_parameters():
    t08 = REPO / "notebooks/tracing/t08_llm_saturation.ipynb"
    assert tool.notebook_assets("paper", [t08]) == {"t08_llm_saturation": ["llama-3.2-3b", "llama-3.1-8b"]}
    assert tool.notebook_assets("paper", [t08], {"models": ["gpt2"], "nosuch": 1}) == {"t08_llm_saturation": ["gpt2"]}
    assert tool.notebook_assets("default", [t08]) == {"t08_llm_saturation": ["smollm2-135m"]}


# ----------------------------------------------------------------------------- fetching ahead


TINY = dict(kind="data", scale="paper", source="url", description="a stand-in", how="copy it by hand",
            files=("a.npz", "b.npz"), config={"base_url": "http://192.0.2.1"})
SETTINGS = ('from layersim.notebook.run import start\n'
            'PRESETS = {"smoke": {"dataset": "digits"}, "default": {"dataset": "digits"}, "paper": {"dataset": "{0}"}}\n'
            'run = start("p/{1}", PRESETS, globals())\nP = run.P\nP')


def _notebook(root, stem, asset):
    return write_notebook(root / "notebooks" / "p" / f"{stem}.ipynb",
                          [SETTINGS.replace("{0}", asset).replace("{1}", stem), "P['dataset']"])


@pytest.fixture
def stand_in(fake_repo, tmp_cache, fake_assets, monkeypatch):
    """A repository with notebook ``n`` that needs the asset ``tiny-set`` at paper scale, a private cache, and
    downloads that write each file's name as its content."""
    fake_assets(assets.Asset("tiny-set", **TINY))
    _notebook(fake_repo, "n", "tiny-set")
    got = []
    monkeypatch.setattr(urllib.request, "urlretrieve", lambda url, to: got.append(url) or open(to, "w").write(url[-5:]))
    return got


def test_the_dry_run_lists_every_asset_with_its_size_and_state(stand_in, fake_assets, fake_repo, capsys):
    fake_assets(assets.Asset("own-set", "data", "paper", "user", "x", "set LAYERSIM_OWN to it", files=("train",),
                             env="LAYERSIM_OWN"),
                assets.Asset("sized-set", **{**TINY, "files": ("c.npz",)}, size_bytes=1_650_000))
    _notebook(fake_repo, "m", "own-set")
    _notebook(fake_repo, "o", "sized-set")
    assert tool.main(["fetch", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^tiny-set +data +size unknown +download +n +url$", out, re.M), out
    assert re.search(r"^sized-set +data +1.65 MB +download +o +url$", out, re.M), out
    assert "3 assets for 3 notebooks: 0 here, 2 to download (1.65 MB of known size, 1 of unknown size" in out
    assert "provided by hand: own-set (m): set LAYERSIM_OWN to it" in out
    assert stand_in == [] and not tool.manifest_path().exists()


def test_fetch_downloads_what_is_missing_and_records_its_sha256(stand_in, tmp_cache, capsys):
    assert tool.main(["fetch", "--nb", "n"]) == 0
    assert stand_in == ["http://192.0.2.1/a.npz", "http://192.0.2.1/b.npz"]
    entry = json.loads((tmp_cache / "fetched.json").read_text())["tiny-set"]
    assert entry["where"] == str(tmp_cache / "tiny-set") and entry["bytes"] == 10
    assert entry["files"] == [{"path": f, "bytes": 5, "sha256": hashlib.sha256(f.encode()).hexdigest()}
                              for f in ("a.npz", "b.npz")]
    lines = "".join(f"{r['sha256']}  {r['path']}\n" for r in entry["files"])
    assert entry["sha256"] == hashlib.sha256(lines.encode()).hexdigest() and entry["date"].endswith("Z")
    capsys.readouterr()
    assert tool.main(["fetch", "--asset", "tiny-set"]) == 0  # here now: nothing downloaded again
    assert len(stand_in) == 2 and re.search(r"^tiny-set +data +size unknown +here ", capsys.readouterr().out, re.M)


def test_a_failed_download_is_one_line_and_the_others_go_on(stand_in, fake_assets, fake_repo, monkeypatch, capsys):
    fake_assets(assets.Asset("other-set", **{**TINY, "files": ("c.npz",)}))
    _notebook(fake_repo, "o", "other-set")

    def refuse(url, to):
        if url.endswith("a.npz"):
            raise OSError("host unreachable\nmore")
        open(to, "w").write("c")

    monkeypatch.setattr(urllib.request, "urlretrieve", refuse)
    assert tool.main(["fetch"]) == 1
    out, err = capsys.readouterr()
    assert "  failed: tiny-set: asset 'tiny-set' not found: download failed: OSError: host unreachable\n" in out
    assert "still not here: tiny-set (n): copy it by hand" in err
    assert list(tool.read_manifest()) == ["other-set"]


def test_the_fetch_command_of_the_offline_error_is_this_command(stand_in, capsys):
    argv = fetch.FETCH_AHEAD.format(name="glue/sst2").split()
    assert argv[:3] == ["python", "-m", "layersim.tools.assets"]
    assert tool.main(argv[3:] + ["--dry-run"]) == 0
    assert re.search(r"^glue/sst2 +data ", capsys.readouterr().out, re.M)
    for bad in (["--asset", "glue"], ["--asset", "torchvision:resnet18.NOSUCH"], ["--asset", "x", "--nb", "n"]):
        with pytest.raises(SystemExit) as info:
            tool.main(["fetch", *bad, "--dry-run"])
        assert info.value.code == 2
        one_line_error(capsys.readouterr().err)


def test_sizes_read_as_the_data_card_writes_them():
    assert [tool.size_text(n) for n in (None, 999, 57_500, 1_650_000, 30_900_000, 10**12)] == [
        "size unknown", "999 B", "57.5 kB", "1.65 MB", "30.9 MB", "1,000 GB"]


def test_the_paper_dry_run_gives_every_downloaded_asset_a_size():
    items = tool.needs("paper")
    unknown = [n.name for n in items if n.size_bytes is None and n.state != "hand"]
    assert not unknown, f"assets the paper scale downloads without a size in the data card: {unknown}"
    sizes = {n.name: n.size_bytes for n in items}
    assert sizes["glue/rte"] == assets.GLUE_DOWNLOAD_BYTES["rte"] != sizes["glue/qqp"]  # each task its own
    assert assets.ASSETS["glue"].size_bytes == round(sum(assets.GLUE_DOWNLOAD_BYTES.values()), -6)  # the card's sum
    # torchvision's record of its ResNet-18 file, 44.661 MiB: the documentation's "44.7 MB"
    assert abs(fetch.weights_size("torchvision:resnet18.IMAGENET1K_V1") - 44.661 * 2**20) < 1


def test_a_glue_task_has_its_own_size_and_other_variants_none():
    assert assets.size_of("glue/mnli") == 57_168_425 and assets.size_of("cifar10") == assets.ASSETS["cifar10"].size_bytes
    assert assets.size_of("glue/wnli") is None  # a task no notebook reads: no size recorded
    with pytest.raises(ValueError, match="needs a task"):
        assets.size_of("glue")


# ----------------------------------------------------------------------------- the checks before a paper-scale run


def test_offline_a_missing_asset_is_one_line_naming_the_fetch_command(stand_in, fake_repo, monkeypatch):
    nb = fake_repo / "notebooks" / "p" / "n.ipynb"
    assert tool.preflight([nb]) == ["tiny-set (n): not here and downloads are off: fetch it ahead where there is "
                                    "internet with `python -m layersim.tools.assets fetch --asset tiny-set`"]
    monkeypatch.setattr(assets, "downloads_allowed", lambda allow=None: True)
    assert tool.preflight([nb]) == []  # the run downloads it


def test_a_missing_asset_provided_by_hand_says_how(stand_in, fake_assets, fake_repo, monkeypatch, tmp_path):
    fake_assets(assets.Asset("own-set", "data", "paper", "user", "x", "set LAYERSIM_OWN to it", files=("train",),
                             env="LAYERSIM_OWN"))
    nb = _notebook(fake_repo, "m", "own-set")
    monkeypatch.setattr(assets, "downloads_allowed", lambda allow=None: True)
    assert tool.preflight([nb]) == ["own-set (m): not here: set LAYERSIM_OWN to it"]
    (tmp_path / "own" / "train").mkdir(parents=True)
    monkeypatch.setenv("LAYERSIM_OWN", str(tmp_path / "own"))
    assert tool.preflight([nb]) == []


def test_the_gpu_must_hold_the_measured_peak(stand_in, fake_repo, monkeypatch):
    nb = fake_repo / "notebooks" / "p" / "n.ipynb"
    monkeypatch.setattr(assets, "downloads_allowed", lambda allow=None: True)
    plan = fake_repo / "benchmarks" / "gpu" / "x-paper-plan.json"
    plan.parent.mkdir(parents=True)
    plan.write_text(json.dumps([{"notebook": "n", "peak_gib": 6.0}, {"notebook": "n", "peak_gib": 10.0},
                                {"notebook": "other", "peak_gib": 99.0}, {"notebook": "n", "peak_gib": None}]))
    assert tool.gpu_peaks() == ({"n": 10.0, "other": 99.0}, plan)
    said = []
    monkeypatch.setattr(tool, "_gpu_free", lambda: (4 * 2**30, "cuda:0 (Fake)"))
    assert tool.preflight([nb], say=said.append) == [
        "n: its measured GPU memory peak is 10.0 GiB (x-paper-plan.json), cuda:0 (Fake) has 4.0 GiB free"]
    monkeypatch.setattr(tool, "_gpu_free", lambda: (11 * 2**30, "cuda:0 (Fake)"))
    assert tool.preflight([nb], say=said.append) == []
    monkeypatch.setattr(tool, "_gpu_free", lambda: None)
    assert tool.preflight([nb], say=said.append) == [] and said[-2:] == [
        "GPU memory not checked: no CUDA device here (x-paper-plan.json measured peaks of n)",
        "disk: 1 download(s) of unknown size (the data card gives none) not counted: tiny-set"]


def test_the_disk_must_hold_the_downloads_of_known_size(stand_in, fake_assets, fake_repo, monkeypatch, tmp_cache):
    fake_assets(assets.Asset("big-set", **{**TINY, "files": ("c.npz",)}, size_bytes=10**12))
    nb = _notebook(fake_repo, "o", "big-set")
    monkeypatch.setattr(assets, "downloads_allowed", lambda allow=None: True)
    said = []
    monkeypatch.setattr(tool, "_disk_free", lambda path: (10**9, 7))
    assert tool.preflight([nb, fake_repo / "notebooks" / "p" / "n.ipynb"], say=said.append) == [
        f"disk of {tmp_cache}: the downloads of known size need 1,000 GB, 1 GB free"]
    assert said == ["disk: 1 download(s) of unknown size (the data card gives none) not counted: tiny-set"]
    monkeypatch.setattr(tool, "_disk_free", lambda path: (2 * 10**12, 7))
    assert tool.preflight([nb], say=said.append) == []
    assert tool.main(["fetch", "--nb", "o", "--dry-run"]) == 0  # a dry run lists; a fetch checks the disk first
    monkeypatch.setattr(tool, "_disk_free", lambda path: (10**9, 7))
    assert tool.main(["fetch", "--nb", "o"]) == 1 and stand_in == []


def test_a_paper_run_that_cannot_start_runs_nothing(stand_in, fake_repo, capsys):
    """The runner checks before the first notebook: one line per failure, a usage error, nothing written."""
    with pytest.raises(SystemExit) as info:
        runner.main(["--scale", "paper", "--nb", "n"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    one_line_error(err, "paper scale, nothing was run")
    assert "\n  tiny-set (n): not here and downloads are off: fetch it ahead where there is internet with " in err
    assert not (fake_repo / "runs").exists()


def test_the_check_command_runs_the_runners_checks(stand_in, capsys, monkeypatch):
    assert tool.main(["check", "--nb", "n"]) == 1
    assert capsys.readouterr().out.startswith("tiny-set (n): not here and downloads are off")
    monkeypatch.setattr(assets, "downloads_allowed", lambda allow=None: True)
    assert tool.main(["check"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "paper scale: ready for 1 notebook(s)"

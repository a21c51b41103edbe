"""Every data set and model the notebooks need at a scale, fetched ahead: ``python -m layersim.tools.assets fetch``.

What a notebook needs is read from its own settings cell (:func:`notebook_assets`): the scale's preset and what the
cell derives from it (model tables, a source network's settings), each setting of :data:`ASSET_KEYS` that names a
registry asset or a GLUE task, and torchvision's ImageNet weights where a setting asks for them. :func:`needs` says
where each is (here, to download, provided by hand), ``fetch`` downloads what is missing through
:mod:`layersim.inputs.fetch` and records every file's sha256 in ``<cache>/fetched.json`` (see docs/modules.md,
`layersim.tools.assets`).
"""

from __future__ import annotations

import argparse
import ast
import datetime as dt
import hashlib
import json
import re
import shutil
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, is_dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from layersim.core import paths
from layersim.core.paths import cache_dir, sha256_of
from layersim.core.writers import write_text
from layersim.inputs import assets, fetch, locate
from layersim.inputs.text_data import GLUE_TASKS
from layersim.nets.cnn import TORCHVISION_ARCHS
from layersim.notebook import rehearsal
from layersim.notebook.results import SCALES
from layersim.tools import plans, report_settings

#: the settings that name a data set or a model: in a preset, a model table's entries, a source network's settings
ASSET_KEYS = frozenset({"dataset", "image_dataset", "target", "transfer_to", "source", "encoder", "pretrained",
                        "models", "tasks", "data", "name"})
#: the prefix of torchvision's pretrained weights (:data:`layersim.inputs.fetch.TORCHVISION_WEIGHTS`)
WEIGHTS = "torchvision:"
MANIFEST = "fetched.json"


# ----------------------------------------------------------------------------- the notebooks' settings cells


def _display_import(node: ast.stmt) -> bool:
    """Whether ``node`` imports IPython, which no preset needs and a machine without Jupyter lacks."""
    if isinstance(node, ast.ImportFrom):
        return (node.module or "").split(".")[0] == "IPython"
    return isinstance(node, ast.Import) and any(a.name.split(".")[0] == "IPython" for a in node.names)


def _notebook(stem: str, root: Path | None = None) -> Path:
    """The notebook ``stem`` (``"t10_aligned_gpt"`` or ``"tracing/t10_aligned_gpt"``) under ``<root>/notebooks``."""
    base = Path(root or paths.repo_root()) / "notebooks"
    found = sorted(base.glob(f"*/{stem.split('/')[-1]}.ipynb"))
    if len(found) != 1:
        raise ValueError(f"no notebook named {stem!r} under {base}")
    return found[0]


def settings_space(notebook: Path, scale: str | None = None, params: Mapping[str, Any] | None = None) -> dict:
    """The names the settings cell of ``notebook`` (the code cell with ``PRESETS`` and ``start(...)``) defines, run
    without Jupyter and without starting a run: its statements before ``start`` (IPython imports and bare calls left
    out); with ``scale``, also ``start``, whose ``run.P`` is that scale's preset with ``params``, and the assignments
    after it, named in ``run.assigned``. ValueError without such a cell."""
    for cell in json.loads(notebook.read_text(encoding="utf-8"))["cells"]:  # plain JSON: no Jupyter needed
        source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        if cell["cell_type"] == "code" and "PRESETS" in source and "start(" in source:
            break
    else:
        raise ValueError(f"{notebook} has no settings cell (PRESETS ... start(...))")

    def start(name, presets, namespace, **settings):  # what a real start would give the cell: the run's settings
        if scale == "paper" and rehearsal.active():  # a rehearsal's counts, as the real start would cut them
            presets = rehearsal.presets_of(name, presets)
        preset = presets[scale]
        return SimpleNamespace(P={**preset, **{k: v for k, v in (params or {}).items() if k in preset}}, assigned=[])

    space: dict = {"scale": scale, "seed": 0, "device": "cpu"}
    run = None
    for node in ast.parse(source).body:
        at_start = "start(" in ast.get_source_segment(source, node)
        if at_start and scale is None:
            break
        if _display_import(node) or isinstance(node, ast.Expr):
            continue
        if run is not None and not isinstance(node, (ast.Assign, ast.AnnAssign)):
            continue
        if at_start:
            space["start"] = start  # after the cell's own import of it
        exec(compile(ast.Module([node], type_ignores=[]), str(notebook), "exec"), space)  # noqa: S102 - our notebook
        if at_start:
            run = space["run"]
        elif run is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            run.assigned += [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]
    return space


def _report_presets() -> dict:
    return report_settings.PRESETS


def _report_named(scale: str, params: Mapping[str, Any] | None) -> dict:
    P = report_settings.settings_for(scale, **{k: v for k, v in (params or {}).items()
                                               if k in report_settings.PRESETS[scale]})
    return {"models": [P["model"]], "dataset": P["dataset"]}


#: the notebooks whose settings come from a module rather than a settings cell with ``start``: stem -> (their
#: ``PRESETS``, the settings at a scale with parameters, under :data:`ASSET_KEYS` keys)
OWN_SETTINGS: dict[str, tuple[Callable[[], dict], Callable[[str, Mapping[str, Any] | None], dict]]] = {
    "layer_report": (_report_presets, _report_named),
}


def notebook_presets(stem: str, root: Path | None = None) -> dict:
    """The ``PRESETS`` of notebook ``stem`` (``"t10_aligned_gpt"`` or ``"tracing/t10_aligned_gpt"``), read from its
    settings cell (:func:`settings_space`; those of :data:`OWN_SETTINGS` from their module). ValueError without such
    a notebook or cell."""
    name = stem.split("/")[-1]
    if name in OWN_SETTINGS:
        return OWN_SETTINGS[name][0]()
    return settings_space(_notebook(stem, root))["PRESETS"]


# ----------------------------------------------------------------------------- what a notebook needs


def _asset_name(text: str) -> str | None:
    """The registry name ``text`` stands for (a GLUE task: ``glue/<task>``), or None."""
    if text in GLUE_TASKS:
        return f"glue/{text}"
    try:
        name = assets.canonical_name(text)
    except ValueError:
        return None
    return None if name == "glue" else name


def _named(value: Any, key: str | None, out: dict[str, None], pretrained: bool = False) -> None:
    """Add to ``out`` every asset ``value`` names under a key of :data:`ASSET_KEYS` (the keys of a mapping under such
    a key too: a04's ``tasks``); a mapping with a torchvision ``arch`` and ``weights`` names those weights, and its
    ``"imagenet"`` is their data, not the data set."""
    if isinstance(value, Mapping):
        weights = value.get("weights")
        own = bool(weights) and value.get("arch") in TORCHVISION_ARCHS
        if own:
            out[fetch.TORCHVISION_WEIGHTS.format(arch=value["arch"], weights=weights)] = None
        for k, v in value.items():
            if key in ASSET_KEYS and isinstance(k, str):
                _named(k, key, out, own)
            _named(v, k if isinstance(k, str) else None, out, own)
    elif is_dataclass(value) and not isinstance(value, type):
        _named({f.name: getattr(value, f.name) for f in fields(value)}, key, out, pretrained)
    elif isinstance(value, (list, tuple, set, frozenset)):
        for v in value:
            _named(v, key, out, pretrained)
    elif isinstance(value, str) and key in ASSET_KEYS:
        name = _asset_name(value)
        if name is not None and not (pretrained and name == "imagenet"):
            out[name] = None


def notebook_assets(scale: str = "paper", notebooks: list[Path] | None = None,
                    params: Mapping[str, Any] | None = None) -> dict[str, list[str]]:
    """``{stem: [asset names]}`` of ``notebooks`` (default: all) at ``scale``, read from each settings cell
    (:func:`settings_space`): its run's settings ``P`` (with ``params``) and the values the cell assigns after
    ``start``, through :func:`_named`. A notebook without a settings cell needs nothing."""
    out = {}
    for nb in plans.discover("") if notebooks is None else notebooks:
        found: dict[str, None] = {}
        if nb.stem in OWN_SETTINGS:
            _named(OWN_SETTINGS[nb.stem][1](scale, params), None, found)
            out[nb.stem] = list(found)
            continue
        try:
            space = settings_space(nb, scale, params)
        except ValueError:
            space = {}
        if space.get("run") is not None:
            _named(space["run"].P, None, found)
            for name in space["run"].assigned:
                _named(space[name], None, found)
        out[nb.stem] = list(found)
    return out


# ----------------------------------------------------------------------------- where each one is


@dataclass(frozen=True)
class Need:
    """One asset the selected notebooks need: its ``name``, the notebooks (``users``), ``kind`` (data, model or
    weights), ``size_bytes`` (the data card's; None: unknown), ``state`` (``"here"``, ``"download"``, ``"hand"``:
    provided by hand, ``"missing"``: no download, e.g. not provisioned), ``note`` (where it is, or what to do) and
    ``dest`` (where a download lands)."""

    name: str
    users: tuple[str, ...]
    kind: str
    size_bytes: int | None
    state: str
    note: str
    dest: Path | None = None


def _hub_cache() -> Path:
    """The Hugging Face hub cache, where model downloads land."""
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE)


def need(name: str, users: tuple[str, ...] = ()) -> Need:
    """Where the asset ``name`` (a registry name, ``glue/<task>`` or ``torchvision:<arch>.<weights>``) is."""
    if name.startswith(WEIGHTS):
        file = fetch.weights_file(name)
        here = file.is_file()
        return Need(name, users, "weights", fetch.weights_size(name), "here" if here else "download",
                    str(file) if here else "torchvision", file.parent)
    asset = assets.get_asset(name)
    if locate.is_available(name):
        hit = None if asset.name == "smollm2-135m" else locate.find_local(name)  # SmolLM2's would be converted
        return Need(name, users, asset.kind, assets.size_of(name), "here", str(hit or "its registry package"))
    if asset.source == "user":
        return Need(name, users, asset.kind, assets.size_of(name), "hand", f"set {asset.env}")
    if not fetch.can_download(name):
        return Need(name, users, asset.kind, assets.size_of(name), "missing", asset.source)
    dest = _hub_cache() if asset.source in ("transformers", "timm", "pypi") else cache_dir()
    via = f"{asset.source}{', ' + asset.hub_id if asset.hub_id else ''}"
    return Need(name, users, asset.kind, assets.size_of(name), "download", via, dest)


def how(item: Need) -> str:
    """What a user does to get ``item`` (the registry's ``how``; torchvision's weights: this command)."""
    if item.name.startswith(WEIGHTS):
        return f"`{fetch.FETCH_AHEAD.format(name=item.name)}` downloads them into torch's hub folder"
    return assets.get_asset(item.name).how


def needs(scale: str = "paper", notebooks: list[Path] | None = None, params: Mapping[str, Any] | None = None,
          names: list[str] | None = None) -> list[Need]:
    """Every asset the ``notebooks`` (default: all) need at ``scale`` (:func:`notebook_assets`), or ``names``, once
    each with the notebooks that need it, in the notebooks' order."""
    users: dict[str, list[str]] = {}
    if names is not None:
        users = {n: [] for n in names}
    else:
        for stem, found in notebook_assets(scale, notebooks, params).items():
            for name in found:
                users.setdefault(name, []).append(stem)
    return [need(name, tuple(stems)) for name, stems in users.items()]


def size_text(n: int | None) -> str:
    """A size as the data card writes it (three significant digits, 1 kB = 10³ B), or ``"size unknown"``."""
    if n is None:
        return "size unknown"
    for unit, factor in (("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if n >= factor:
            return f"{n / factor:{'.3g' if n < 1000 * factor else ',.0f'}} {unit}"
    return f"{n} B"


def _short(stems: tuple[str, ...]) -> str:
    """Notebooks by their number (``t01``), or whole where they have none (``layer_report``)."""
    return " ".join(s.split("_")[0] if re.fullmatch(r"[a-z]\d\d", s.split("_")[0]) else s for s in stems)


def listing(items: list[Need], notebooks: list[str]) -> list[str]:
    """The lines of a dry run: one per asset (name, kind, size, state, notebooks), then the totals."""
    lines = [f"{n.name:40} {n.kind:7} {size_text(n.size_bytes):>12}  {n.state:8}  {_short(n.users):24}  {n.note}"
             for n in items]
    get = [n for n in items if n.state == "download"]
    known = sum(n.size_bytes or 0 for n in get)
    unknown = [n.name for n in get if n.size_bytes is None]
    lines.append(f"{len(items)} assets for {len(notebooks)} notebooks: {sum(n.state == 'here' for n in items)} here, "
                 f"{len(get)} to download ({size_text(known)} of known size"
                 + (f", {len(unknown)} of unknown size: the data card gives none" if unknown else "") + ")")
    for n in items:
        if n.state in ("hand", "missing"):
            lines.append(f"{'provided by hand' if n.state == 'hand' else 'not here, no download'}: {n.name} "
                         f"({_short(n.users)}): {how(n)}")
    idle = tuple(s for s in notebooks if not any(s in n.users for n in items))
    if idle:
        lines.append(f"no asset named in the settings of: {_short(idle)}")
    return lines


# ----------------------------------------------------------------------------- fetching and the manifest


def _files(name: str, path: Path) -> list[Path]:
    """The files of the asset ``name`` that landed at ``path`` (a file, or a folder; a torchvision data set's own
    folder under the torchvision root)."""
    if not name.startswith(WEIGHTS) and assets.get_asset(name).source == "torchvision":
        path = path / locate.TORCHVISION_FOLDERS[assets.get_asset(name).name]
    return [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())


def record(name: str, path: Path, when: dt.datetime | None = None) -> dict:
    """The manifest entry of the asset ``name`` downloaded to ``path``: where, its files (path, bytes, sha256), their
    bytes and one sha256 over the files' lines (``<sha256>  <path>``, sorted), and the date."""
    base = path if path.is_dir() else path.parent
    rows = [{"path": f.relative_to(base).as_posix(), "bytes": f.stat().st_size, "sha256": sha256_of(f)}
            for f in _files(name, path)]
    digest = hashlib.sha256("".join(f"{r['sha256']}  {r['path']}\n" for r in rows).encode()).hexdigest()
    when = when or dt.datetime.now(dt.timezone.utc)
    return {"where": str(path), "files": rows, "bytes": sum(r["bytes"] for r in rows), "sha256": digest,
            "date": when.strftime("%Y-%m-%dT%H:%M:%SZ")}


def manifest_path() -> Path:
    """``<cache>/fetched.json``: what :func:`fetch_all` downloaded, by asset name."""
    return cache_dir() / MANIFEST


def read_manifest() -> dict:
    """The manifest, or {} when there is none."""
    path = manifest_path()
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def download(name: str) -> Path:
    """Download the asset ``name`` (downloads allowed whatever the environment says) and return where it landed;
    AssetNotFoundError (or torchvision's error) when that fails."""
    if name.startswith(WEIGHTS):
        fetch.torchvision_weights(name).get_state_dict(progress=True)  # torchvision's download, checked against the hash in its name
        return fetch.weights_file(name)
    return fetch.resolve(name, allow_download=True)


def fetch_all(items: list[Need], say: Callable[[str], None] = print) -> list[str]:
    """Download every item to download, one after another, adding each to the manifest as it lands; returns a line
    for each that failed."""
    failed = []
    for n in items:
        if n.state != "download":
            continue
        say(f"fetching {n.name} ({size_text(n.size_bytes)}) ...")
        try:
            path = download(n.name)
        except Exception as exc:  # noqa: BLE001 - one line per failure, the others go on
            failed.append(f"{n.name}: {(str(exc).strip().splitlines() or [type(exc).__name__])[0]}")
            say(f"  failed: {failed[-1]}")
            continue
        entry = record(n.name, path)
        write_text(manifest_path(), json.dumps({**read_manifest(), n.name: entry}, indent=1) + "\n")
        say(f"  {size_text(entry['bytes'])} in {len(entry['files'])} files at {path} "
            f"(sha256 {entry['sha256'][:16]}...)")
    return failed


# ----------------------------------------------------------------------------- the checks before a paper-scale run


def gpu_peaks(root: Path | None = None) -> tuple[dict[str, float], Path | None]:
    """``({stem: GiB}, plan)``: each notebook's largest GPU memory peak in the newest measured paper-scale plan
    (``benchmarks/gpu/*paper-plan.json``, :mod:`layersim.tools.bench_paper`); ``({}, None)`` without one."""
    found = sorted((Path(root or paths.repo_root()) / "benchmarks" / "gpu").glob("*paper-plan.json"))
    if not found:
        return {}, None
    peaks: dict[str, float] = {}
    for row in json.loads(found[-1].read_text(encoding="utf-8")):
        if row.get("peak_gib") is not None:
            peaks[row["notebook"]] = max(peaks.get(row["notebook"], 0.0), float(row["peak_gib"]))
    return peaks, found[-1]


def _gpu_free() -> tuple[int, str] | None:
    """``(free bytes, device)`` of the current CUDA device, or None without CUDA."""
    import torch

    if not torch.cuda.is_available():
        return None
    free, _ = torch.cuda.mem_get_info()
    return free, f"cuda:{torch.cuda.current_device()} ({torch.cuda.get_device_name()})"


def _disk_free(path: Path) -> tuple[int, int]:
    """``(free bytes, device id)`` of the file system that holds ``path`` (its nearest existing folder)."""
    path = Path(path).absolute()
    while not path.exists():
        path = path.parent
    return shutil.disk_usage(path).free, path.stat().st_dev


def gpu_problems(stems: list[str], say: Callable[[str], None] = print) -> list[str]:
    """One line for each of ``stems`` whose measured GPU memory peak exceeds the free memory of the current CUDA
    device; without CUDA, nothing, and ``say`` tells that the check was skipped."""
    peaks, plan = gpu_peaks()
    wanted = {s: peaks[s] for s in stems if s in peaks}
    if not wanted:
        return []
    free = _gpu_free()
    if free is None:
        say(f"GPU memory not checked: no CUDA device here ({plan.name} measured peaks of {_short(tuple(wanted))})")
        return []
    have, device = free
    return [f"{s}: its measured GPU memory peak is {gib:.1f} GiB ({plan.name}), {device} has "
            f"{have / 2**30:.1f} GiB free" for s, gib in wanted.items() if have < gib * 2**30]


def disk_problems(items: list[Need], say: Callable[[str], None] = print) -> list[str]:
    """One line for each file system that cannot hold the downloads of known size among ``items`` that land on it;
    ``say`` names the downloads of unknown size, which are not counted."""
    unknown = [n.name for n in items if n.state == "download" and n.size_bytes is None]
    if unknown:
        say(f"disk: {len(unknown)} download(s) of unknown size (the data card gives none) not counted: "
            + ", ".join(unknown))
    disks: dict[int, list] = {}
    for n in items:
        if n.state == "download" and n.size_bytes is not None:
            free, device = _disk_free(n.dest)
            disks.setdefault(device, [free, n.dest, 0])[2] += n.size_bytes
    return [f"disk of {dest}: the downloads of known size need {size_text(wanted)}, {size_text(free)} free"
            for free, dest, wanted in disks.values() if wanted > free]


def preflight(notebooks: list[Path], params: Mapping[str, Any] | None = None,
              say: Callable[[str], None] = print) -> list[str]:
    """The checks before the paper scale runs ``notebooks``, one line per failure: every asset here, or to download
    while downloads are allowed; the GPU's free memory against each notebook's measured peak; room on disk for the
    downloads the run will make. ``say`` gets the checks skipped or partial."""
    items = needs("paper", notebooks, params)
    allowed = assets.downloads_allowed()
    problems = []
    for n in items:
        if n.state == "download" and not allowed:
            problems.append(f"{n.name} ({_short(n.users)}): not here and downloads are off: fetch it ahead where "
                            f"there is internet with `{fetch.FETCH_AHEAD.format(name=n.name)}`")
        elif n.state in ("hand", "missing"):
            problems.append(f"{n.name} ({_short(n.users)}): not here: {how(n)}")
    return problems + gpu_problems([nb.stem for nb in notebooks], say) + disk_problems(items if allowed else [], say)


# ----------------------------------------------------------------------------- the command line


def _asset_argument(text: str) -> str:
    """An ``--asset`` value checked: a registry name or alias (``glue/<task>``), or ``torchvision:<arch>.<weights>``."""
    if text.startswith(WEIGHTS):
        arch = text[len(WEIGHTS):].partition(".")[0]
        if arch not in TORCHVISION_ARCHS:
            raise argparse.ArgumentTypeError(f"{text!r}: torchvision weights of one of {', '.join(TORCHVISION_ARCHS)}")
        try:
            fetch.torchvision_weights(text)
        except (KeyError, ValueError):
            raise argparse.ArgumentTypeError(f"{text!r}: torchvision has no such weights") from None
        return text
    try:
        asset, variant = assets.split_name(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return f"{asset.name}/{variant}" if variant else asset.name


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m layersim.tools.assets", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    get = sub.add_parser("fetch", help="list, then download, every asset the selected notebooks need")
    get.add_argument("--scale", choices=SCALES, default="paper", help="the presets read (default: paper)")
    get.add_argument("--nb", default="", help="the notebooks, as the runner selects them (default: all)")
    get.add_argument("--asset", action="append", type=_asset_argument, default=None,
                     help="only this asset (repeatable): a registry name, glue/<task> or torchvision:<arch>.<weights>")
    get.add_argument("--dry-run", action="store_true", help="list only: what is here, what would be downloaded")
    check = sub.add_parser("check", help="the runner's checks before a paper-scale run, without running")
    check.add_argument("--nb", default="", help="the notebooks, as the runner selects them (default: all)")
    args = ap.parse_args(argv)
    if getattr(args, "asset", None) and args.nb:
        ap.error("--asset names the assets itself: not with --nb")
    try:
        notebooks = plans.discover(args.nb)
    except ValueError as exc:
        ap.error(str(exc))
    if not notebooks:
        ap.error(f"no notebook matches {args.nb!r} under notebooks/")
    if args.command == "check":
        problems = preflight(notebooks)
        print("\n".join(problems) or f"paper scale: ready for {len(notebooks)} notebook(s)")
        return 1 if problems else 0
    items = needs(args.scale, notebooks, names=args.asset)
    what = "the assets asked for" if args.asset else f"scale {args.scale!r}, {len(notebooks)} notebook(s)"
    print(f"## {what}: asset, kind, size (data card), state, notebooks, where\n")
    print("\n".join(listing(items, [] if args.asset else [nb.stem for nb in notebooks])))
    if args.dry_run:
        return 0
    full = disk_problems(items)
    if full:
        print("\n".join(full), file=sys.stderr)
        return 1
    failed = fetch_all(items)
    left = [n for n in (need(n.name, n.users) for n in items) if n.state != "here"]
    for n in left:
        print(f"still not here: {n.name} ({_short(n.users)}): {how(n)}", file=sys.stderr)
    print(f"manifest of the downloads: {manifest_path()}")
    return 1 if failed or left else 0


if __name__ == "__main__":
    sys.exit(main())

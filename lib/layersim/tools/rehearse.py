"""The rehearsal of the paper scale, end to end: ``python -m layersim.tools.rehearse [--nb PATTERN]``.

Every selected notebook runs through papermill at ``scale="paper"`` with the counts of
:mod:`layersim.notebook.rehearsal` cut, offline, on fixture files in the real on-disk formats
(:mod:`layersim.tools.fixtures`) and fixture models of the published sizes (:mod:`layersim.tools.fixture_models`),
written once into ``<cache>/rehearsal-fixtures/`` (:func:`prepare`). Each notebook runs in a fresh project cache
(:func:`environment`: the fixtures linked in, nothing trained before; removed after it) with downloads off, and every asset it asks for
is logged (``layersim.inputs.assets.REQUEST_LOG``); :func:`compare` sets those beside what
``python -m layersim.tools.assets fetch --dry-run`` lists for it. The outputs go to ``runs/rehearsal/`` with the
rehearsal's mark, and ``runs/rehearsal/summary.json`` records each notebook's time, status and requests (see
docs/modules.md, ``layersim.tools.rehearse``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

from layersim.core.paths import cache_dir, repo_root
from layersim.core.writers import write_text
from layersim.inputs import assets as registry
from layersim.notebook import rehearsal
from layersim.tools import fixture_models, fixtures, plans

__all__ = ["CI_SUBSET", "FIXTURES", "FORMATS", "RECORDS", "SITE", "VERSION", "compare", "environment", "fixture_names",
           "main", "prepare", "readme_sentence", "record", "requested", "unmeasured"]

#: the folder of the fixtures in the project cache (written once, read by every rehearsal)
FIXTURES = "rehearsal-fixtures"
#: the version of the fixtures: a change of what :func:`prepare` writes raises it, and the fixtures are written anew
VERSION = 3
#: the ``sitecustomize`` of a rehearsal's processes: torchvision accepts the fixture CIFAR files' checksums
SITE = '''"""Written by layersim.tools.rehearse for a rehearsal's processes (papermill's kernels among them)."""
import os

if os.environ.get("LAYERSIM_REHEARSE"):
    from pathlib import Path

    from layersim.tools.fixtures import trust_cifar

    trust_cifar(Path(os.environ["LAYERSIM_REHEARSAL_FIXTURES"]) / "cache" / "torchvision")
'''
#: the on-disk formats of the fixtures, each with the assets written in it
FORMATS = {
    "torchvision's MNIST folder (idx files)": ("mnist",),
    "torchvision's CIFAR folders (pickled batches)": ("cifar10", "cifar100"),
    "CIFAR-10.2's npz files": ("cifar10.2",),
    "ImageFolder trees of JPEG files": ("imagenet", "office31"),
    "datasets save_to_disk folders": ("glue/sst2", "glue/rte", "glue/mrpc", "glue/mnli", "hellaswag", "wikitext-103"),
    "save_pretrained folders with a tokenizer": ("bert-base-uncased", "roberta-base", "albert-large-v2",
                                                 "electra-base-discriminator", "gpt2", "llama-3.2-3b", "llama-3.1-8b",
                                                 "clip-vit-base-patch32"),
    "save_pretrained folders of vision models": ("vit-small-patch16-224", "vit-base-patch16-224", "dinov2-small",
                                                 "dinov2-base", "deit-small-patch16-224-hf"),
    "torchvision weights in torch's hub folder": ("torchvision:resnet18.IMAGENET1K_V1",
                                                  "torchvision:resnet101.IMAGENET1K_V1"),
}
#: the notebooks the fuller CI target rehearses: every paper and every on-disk format of :data:`FORMATS` at least
#: once, at the least cost (their idle seconds in the whole rehearsal of 2026-11-29: 13, 156, 234, 62, 111; ``make
#: rehearse`` runs all of them)
CI_SUBSET = ("alignment/a04_architectures", "alignment/a10_negative_transfer", "clusters/c03_layer_skipping",
             "redundancy/r01_block_similarity", "tracing/t06_transfer")
#: the folder of the committed records of whole rehearsals (``--record``): ``<date>-paper-rehearsal.json`` and ``.md``
RECORDS = Path("benchmarks") / "rehearsal"
#: offline assets a rehearsal reads from the project's own cache where they were converted there (SmolLM2's GGUF
#: conversion takes minutes and is the same in every run)
CONVERTED = ("models/smollm2-135m",)


def fixture_names(notebooks: list[Path]) -> list[str]:
    """What a compute node would be given for ``notebooks``: the assets ``assets fetch --dry-run`` lists for them with
    the rehearsal's cuts on, less those that ship with the project (the offline assets of ``make setup``)."""
    from layersim.tools import assets as fetch_tool
    from layersim.tools.runner import temporary_environ

    with temporary_environ(**{rehearsal.ENV: "1"}):
        listed = fetch_tool.notebook_assets("paper", notebooks)
    offline = {a.name for a in registry.list_assets(scale="offline")}
    return list(dict.fromkeys(a for names in listed.values() for a in names if a not in offline))


def prepare(names: list[str], folder: Path | None = None, progress: bool = True) -> Path:
    """Write the fixtures of ``names`` (data sets of ``fixtures.WRITERS``, models of ``fixture_models.MODELS``,
    ``torchvision:`` weights) into ``folder`` (default ``<cache>/rehearsal-fixtures``) unless written there before by
    this :data:`VERSION`; ``ValueError`` naming an asset without a fixture. Returns the folder."""
    folder = Path(folder or cache_dir(FIXTURES))
    stamp = folder / "fixtures.json"
    record = json.loads(stamp.read_text()) if stamp.is_file() else {}
    if record.get("version") != VERSION:
        if folder.exists():
            shutil.rmtree(folder)
        record = {"version": VERSION, "written": [], "seconds": {}}
    todo = [n for n in names if n not in record["written"]]
    unknown = [n for n in todo if n not in fixtures.WRITERS and n not in fixture_models.MODELS
               and not n.startswith("torchvision:")]
    if unknown:
        raise ValueError(f"no fixture for {unknown}: add one to layersim.tools.fixtures or fixture_models")
    from layersim.tools.runner import temporary_environ

    with temporary_environ(TORCH_HOME=str(folder / "torch")):  # torchvision's weights land in the fixtures' hub
        for name in todo:
            t0 = time.perf_counter()
            if name in fixtures.WRITERS:
                fixtures.write_data(folder / "cache", [name])
            elif name in fixture_models.MODELS:
                fixture_models.write_models(folder / "cache", [name], progress=progress)
            else:
                fixture_models.write_weights((name,))
            record["written"].append(name)
            record["seconds"][name] = round(time.perf_counter() - t0, 1)
            write_text(stamp, json.dumps({**record, "tokenizers": fixture_models.TOKENIZERS,
                                          "fewer_layers": {"models": fixture_models.FEWER_LAYERS,
                                                           "why": fixture_models.WHY_FEWER}}, indent=1) + "\n")
    (folder / "site").mkdir(parents=True, exist_ok=True)
    (folder / "site" / "sitecustomize.py").write_text(SITE)
    (folder / "cache").mkdir(exist_ok=True)
    return folder


def environment(folder: Path, work: Path, log: Path) -> dict[str, str]:
    """The environment of one notebook's rehearsal: a fresh project cache ``work/cache`` with the fixtures of
    ``folder`` linked in, torch's hub folder the fixtures', an empty Hugging Face cache, downloads off, the request
    log ``log`` and the rehearsal switched on."""
    cache = work / "cache"
    if work.exists():
        shutil.rmtree(work)
    cache.mkdir(parents=True)
    for entry in sorted((folder / "cache").iterdir()):
        (cache / entry.name).symlink_to(entry.resolve(), target_is_directory=entry.is_dir())
    for sub in CONVERTED:
        own = cache_dir() / sub
        if own.is_dir() and not (cache / sub).exists():
            (cache / sub).parent.mkdir(parents=True, exist_ok=True)
            (cache / sub).symlink_to(own.resolve(), target_is_directory=True)
    site = str(folder / "site")
    return {rehearsal.ENV: "1", "LAYERSIM_REHEARSAL_FIXTURES": str(folder), "LAYERSIM_CACHE": str(cache),
            "TORCH_HOME": str(folder / "torch"), "HF_HOME": str(work / "hf"), "HF_HUB_OFFLINE": "1",
            "LAYERSIM_OFFLINE": "1", registry.REQUEST_LOG: str(log),
            "PYTHONPATH": os.pathsep.join([site] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])}


def requested(log: Path) -> list[str]:
    """The assets a rehearsal asked for (``log``, one name a line), once each, in order."""
    if not log.is_file():
        return []
    return list(dict.fromkeys(line.strip() for line in log.read_text().splitlines() if line.strip()))


def compare(stem: str, asked: list[str]) -> dict:
    """What notebook ``stem`` asked for beside what ``assets fetch --dry-run`` lists for it (with the rehearsal's
    cuts on): ``listed``, ``asked``, ``not_listed`` (asked, not listed: a fetch ahead would miss it; offline assets
    that ship with the project apart) and ``not_asked``."""
    from layersim.tools import assets as fetch_tool

    listed = fetch_tool.notebook_assets("paper", [_notebook(stem)])[stem]
    offline = {a.name for a in registry.list_assets(scale="offline")}
    return {"listed": listed, "asked": asked,
            "not_listed": [a for a in asked if a not in listed and a not in offline],
            "not_asked": [a for a in listed if a not in asked]}


def unmeasured(folder: Path) -> dict:
    """``{"not_measurable": message}`` when the rehearsal written to ``folder`` recorded its claims as not measurable
    (:meth:`layersim.notebook.run.Run.measuring`), else ``{}``."""
    path = folder / "metrics.json"
    if not path.is_file():
        return {}
    message = json.loads(path.read_text()).get(rehearsal.KEY, {}).get("not_measurable")
    return {"not_measurable": message} if message else {}


def record(runs: dict[str, dict], seconds: float, root: Path, date: str | None = None) -> Path:
    """Write the record of one whole rehearsal into ``root/RECORDS``: ``<date>-paper-rehearsal.json`` (each
    notebook's entry of the summary, the total wall time, the machine's cores) and a ``.md`` table of it; returns the
    ``.json``. ``runs``: notebook stem -> its summary entry, as this invocation ran them."""
    if not runs:
        raise ValueError("a rehearsal record needs at least one notebook's run")
    date = date or time.strftime("%Y-%m-%d")
    folder = Path(root) / RECORDS
    folder.mkdir(parents=True, exist_ok=True)
    data = {"date": date, "total_seconds": round(seconds, 1), "cpu_count": os.cpu_count(), "notebooks": runs}
    path = write_text(folder / f"{date}-paper-rehearsal.json", json.dumps(data, indent=1) + "\n")
    ok = sum(r["ok"] for r in runs.values())
    rows = [f"| {stem} | {'ok' if r['ok'] else 'FAILED'} | {r['seconds']:.0f} | "
            f"{', '.join(r.get('not_listed', [])) or '–'} | {r.get('not_measurable', '–')} |" for stem, r in runs.items()]
    write_text(path.with_suffix(".md"), "\n".join([
        f"# The paper scale rehearsed, {date}", "",
        f"`make rehearse RECORD=1` on {data['cpu_count']} CPU cores, offline, on fixture data and randomly initialised "
        f"models of the published sizes: {ok} of {len(runs)} notebooks ran to the end in {seconds / 60:.0f} min "
        "(each in a fresh cache: every model it trains or fine-tunes is trained again; the fixtures' writing counted where "
        "they were not there yet). Written by "
        "`python -m layersim.tools.rehearse --record`; a rehearsal says the paper path runs, not what it finds.", "",
        "| notebook | status | seconds | asked for, not listed by the dry run | claims not measurable |",
        "|---|---|---:|---|---|", *rows, ""]))
    return path


def readme_sentence(root: Path) -> str:
    """The README's sentence on the newest whole rehearsal (:func:`record`); "" when there is none."""
    found = sorted((Path(root) / RECORDS).glob("*-paper-rehearsal.json"))
    if not found:
        return ""
    data = json.loads(found[-1].read_text(encoding="utf-8"))
    runs = data["notebooks"]
    page = found[-1].with_suffix(".md").relative_to(root).as_posix()
    return (f"The paper scale rehearsed (`make rehearse`: every notebook at `scale=\"paper\"` offline, on fixture data "
            f"and randomly initialised models of the published sizes, counts cut): {sum(r['ok'] for r in runs.values())}"
            f" of {len(runs)} notebooks ran to the end in **{data['total_seconds'] / 60:.0f} min** on "
            f"{data['cpu_count']} CPU cores (measured {data['date']}; [`{page}`]({page})).")


def _notebook(stem: str) -> Path:
    found = plans.discover(stem)
    if len(found) != 1:
        raise ValueError(f"{stem!r} names {len(found)} notebooks")
    return found[0]


def _finish(nb: Path, rc: int, seconds: float, work: Path, log: Path, out: Path) -> dict:
    """One notebook's summary entry once its run ended with exit status ``rc``: its status, time, requests beside the
    fetch list (:func:`compare`) and claims not measurable; its fresh cache is removed."""
    from layersim.tools.runner import temporary_environ

    try:
        with temporary_environ(**{rehearsal.ENV: "1"}):  # the dry run with the rehearsal's cuts on, as the run had them
            asked = compare(nb.stem, requested(log))
    finally:
        shutil.rmtree(work, ignore_errors=True)  # its fresh cache: fine-tuned checkpoints of GBs, used once
    return {"ok": rc == 0, "seconds": round(seconds, 1), "date": time.strftime("%Y-%m-%d"), **asked,
            **unmeasured(out / nb.parent.name / nb.stem)}


def _one_in_process(nb: Path, folder: Path, out: Path) -> tuple[int, float, Path, Path]:
    """Rehearse ``nb`` in this process (the runner's own stop handling: a signal gives an exit status >= 128);
    returns its exit status, seconds, fresh cache and request log."""
    from layersim.tools import runner

    work, log = _paths(nb, out)
    saved = dict(os.environ)
    os.environ.update(environment(folder, work, log))
    t0 = time.perf_counter()
    try:
        rc = runner.main(_runner_args(nb))
    except SystemExit as stop:  # the runner's up-front checks refuse with exit status 2
        rc = stop.code if isinstance(stop.code, int) else 2
    finally:
        seconds = time.perf_counter() - t0
        os.environ.clear()
        os.environ.update(saved)
    return rc, seconds, work, log


def _runner_args(nb: Path) -> list[str]:
    """The runner's arguments for ``nb``'s rehearsal, in this process or in one of its own."""
    return ["--scale", "paper", "--nb", f"{nb.parent.name}/{nb.stem}"]


def _paths(nb: Path, out: Path) -> tuple[Path, Path]:
    """The fresh cache and the request log of ``nb``'s rehearsal under ``out``."""
    log = out / "requests" / f"{nb.stem}.txt"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.unlink(missing_ok=True)
    return out / "work" / nb.stem, log


def _concurrently(notebooks: list[Path], folder: Path, out: Path, jobs: int, done) -> int:
    """Rehearse ``notebooks`` ``jobs`` at a time, each runner in its own process with its own environment (threads:
    the cores shared out, unless set); ``done(nb, rc, seconds, work, log)`` as each ends. A stop (SIGINT, SIGTERM,
    SIGHUP) is passed on, once, to the running notebooks (each in a session of its own, out of reach of the terminal's
    signals), which put back what they hold; returns 128 + the signal then, else 0."""
    import signal
    import subprocess

    from layersim.tools.batch import THREAD_VARIABLES

    threads = {} if os.environ.get("OMP_NUM_THREADS") else {
        var: str(max(1, (os.cpu_count() or 1) // jobs)) for var in THREAD_VARIABLES}
    queue, running, stopped = list(notebooks), {}, []

    def stop(signum, _frame):
        stopped.append(signum)
        for proc in running:
            proc.send_signal(signum)

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        while queue or running:
            while queue and len(running) < jobs and not stopped:
                nb = queue.pop(0)
                work, log = _paths(nb, out)
                env = {**os.environ, **environment(folder, work, log), **threads}
                proc = subprocess.Popen([sys.executable, "-m", "layersim.tools.runner", *_runner_args(nb)], env=env,
                                        start_new_session=True)
                running[proc] = (nb, time.perf_counter(), work, log)
            for proc in [p for p in running if p.poll() is not None]:
                nb, t0, work, log = running.pop(proc)
                rc = proc.returncode if proc.returncode >= 0 else 128 - proc.returncode
                if stopped:
                    shutil.rmtree(work, ignore_errors=True)
                    print(f"rehearsal stopped during {nb.stem}", flush=True)
                else:
                    done(nb, rc, time.perf_counter() - t0, work, log)
            time.sleep(0.2)
    finally:
        for proc in running:  # an error here: the notebooks still running are stopped, not left behind
            proc.terminate()
        for proc in running:
            proc.wait()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 128 + stopped[0] if stopped else 0


def main(argv: list[str] | None = None) -> int:
    """The command line: prepare the fixtures, rehearse each selected notebook in its own fresh cache (``--jobs`` at
    a time), write ``runs/rehearsal/summary.json``; exit status 1 when a notebook failed."""
    ap = argparse.ArgumentParser(prog="python -m layersim.tools.rehearse", description=__doc__.split("\n")[0])
    ap.add_argument("--nb", default="", help="glob or substring of notebooks/<paper>/<stem> (default: all)")
    ap.add_argument("--fixtures", default=None, help="the fixtures' folder (default: <cache>/rehearsal-fixtures)")
    ap.add_argument("--jobs", type=int, default=1,
                    help="notebooks rehearsed at once, each in its own process with the cores shared out (default 1)")
    ap.add_argument("--record", action="store_true",
                    help=f"write the record of this whole rehearsal into {RECORDS}/ (the README cites the newest)")
    args = ap.parse_args(argv)
    if args.record and args.nb:
        ap.error("--record records the whole rehearsal: drop --nb")
    if args.jobs < 1:
        ap.error(f"--jobs {args.jobs}: give 1 or more notebooks at once")
    notebooks = plans.discover(args.nb)
    if not notebooks:
        ap.error(f"no notebook matches {args.nb!r}")

    start = time.perf_counter()  # the record's total counts writing the fixtures, where they were not there yet
    folder = prepare(fixture_names(notebooks), Path(args.fixtures) if args.fixtures else None)
    out = repo_root() / "runs" / rehearsal.KEY
    summary_file = out / "summary.json"
    summary = json.loads(summary_file.read_text()) if summary_file.is_file() else {}
    ran: dict[str, dict] = {}

    def done(nb: Path, rc: int, seconds: float, work: Path, log: Path) -> None:
        summary[nb.stem] = ran[nb.stem] = _finish(nb, rc, seconds, work, log, out)
        write_text(summary_file, json.dumps(summary, indent=1) + "\n")
        entry = summary[nb.stem]
        note = f"; claims not measurable: {entry['not_measurable']}" if "not_measurable" in entry else ""
        print(f"rehearsal {nb.stem}: {'ok' if rc == 0 else 'FAILED'} ({seconds:.0f} s{note})", flush=True)

    if args.jobs > 1:
        rc = _concurrently(notebooks, folder, out, args.jobs, done)
        if rc:
            return rc
    else:
        for nb in notebooks:
            rc, seconds, work, log = _one_in_process(nb, folder, out)
            if rc >= 128:  # stopped by a signal (SIGINT, SIGTERM): the rehearsal stops too, this notebook unrecorded
                shutil.rmtree(work, ignore_errors=True)
                print(f"rehearsal stopped during {nb.stem}", flush=True)
                return rc
            done(nb, rc, seconds, work, log)
    if args.record:
        path = record(ran, time.perf_counter() - start, repo_root())
        print(f"recorded: {path.relative_to(repo_root())}", flush=True)
    return 1 if any(not entry["ok"] for entry in ran.values()) else 0


if __name__ == "__main__":
    sys.exit(main())

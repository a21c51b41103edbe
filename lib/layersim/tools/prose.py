"""Render or check the numbers in the committed notebooks' prose (:mod:`layersim.notebook.prose`).

``python -m layersim.tools.prose render [--nb PATTERN]`` fills every Markdown template of the committed notebooks
and scale checks from the ``metrics.json`` committed beside them, running no notebook. ``check`` renders nothing: it
lists the cells whose text differs from their template rendered and the numbers typed by hand that
:data:`EXCEPTIONS` does not list; exit 1 when there is one.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import sys
from collections.abc import Iterator
from pathlib import Path

from layersim.core import writers
from layersim.core.paths import repo_root
from layersim.notebook import prose
from layersim.tools import claims

#: where the committed scale checks live: ``figures/scale_checks/<paper>/<stem>/<stem>.ipynb``
SCALE_CHECKS = f"figures/{claims.SCALE_CHECK_FOLDER}"
#: the file listing the numbers a notebook's prose may hold without a field, each with its reason
EXCEPTIONS = Path("notebooks") / "prose_exceptions.json"


def committed_notebooks(root: Path | None = None) -> Iterator[tuple[Path, Path]]:
    """``(notebook, metrics.json)`` of every committed notebook with a committed run: the paper notebooks (their
    results in ``figures/<paper>/<stem>/``) and the scale checks (beside their notebook)."""
    root = root or repo_root()
    for nb in sorted((root / "notebooks").glob("*/*.ipynb")):
        metrics = root / "figures" / nb.parent.name / nb.stem / "metrics.json"
        if metrics.is_file():
            yield nb, metrics
    for nb in sorted((root / SCALE_CHECKS).glob("*/*/*.ipynb")):
        if (nb.parent / "metrics.json").is_file():
            yield nb, nb.parent / "metrics.json"


def label(nb: Path, root: Path | None = None) -> str:
    """A committed notebook's name in the exceptions file: its path in the repository."""
    return nb.resolve().relative_to((root or repo_root()).resolve()).as_posix()


def is_scale_check(nb_label: str) -> bool:
    """Whether ``nb_label`` (:func:`label`) is a scale check's copy, rendered with ``strict=False``."""
    return nb_label.startswith(f"{SCALE_CHECKS}/")


def exceptions_label(nb_label: str) -> str:
    """The notebook whose excused numbers apply to ``nb_label``: itself, or for a scale check's copy
    (``figures/scale_checks/<paper>/<stem>/<stem>.ipynb``) the notebook it copies (``notebooks/<paper>/<stem>.ipynb``),
    whose text it shares."""
    if not is_scale_check(nb_label):
        return nb_label
    paper, stem = nb_label[len(SCALE_CHECKS) + 1:].split("/")[:2]
    return f"notebooks/{paper}/{stem}.ipynb"


def load_exceptions(root: Path | None = None) -> dict:
    """The exceptions file: ``{"notebooks": {label: reason}, "numbers": [{"notebook", "number", "context",
    "reason"}]}`` -- whole notebooks whose prose is not yet bound to their runs, and single numbers (a number
    is excused where its ``context`` occurs in the text around it)."""
    path = (root or repo_root()) / EXCEPTIONS
    data = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    for entry in data.get("numbers", []):
        if not {"notebook", "number", "context", "reason"} <= set(entry) or not entry["reason"].strip():
            raise ValueError(f"{EXCEPTIONS}: an excused number needs notebook, number, context and reason: {entry}")
    if any(not str(r).strip() for r in data.get("notebooks", {}).values()):
        raise ValueError(f"{EXCEPTIONS}: every excused notebook needs a reason")
    return {"notebooks": data.get("notebooks", {}), "numbers": data.get("numbers", [])}


def unexcused(nb_label: str, nb: dict, exceptions: dict) -> list[tuple[int, str, str]]:
    """The loose numbers of ``nb`` (:func:`layersim.notebook.prose.prose_numbers`) that the exceptions do not excuse; a
    scale check's copy shares its notebook's (:func:`exceptions_label`)."""
    if nb_label in exceptions["notebooks"]:
        return []
    mine = [e for e in exceptions["numbers"] if e["notebook"] in (nb_label, exceptions_label(nb_label))]
    return [(cell, number, context) for cell, number, context in prose.prose_numbers(nb)
            if not any(e["number"] == number and e["context"] in context for e in mine)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m layersim.tools.prose", description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=("render", "check"))
    parser.add_argument("--nb", default="", help="only notebooks whose path matches this glob or substring")
    args = parser.parse_args(argv)
    root = repo_root()
    exceptions = load_exceptions(root)
    problems = 0
    for nb_path, metrics in committed_notebooks(root):
        name = label(nb_path, root)
        if args.nb and args.nb not in name and not fnmatch.fnmatch(name, args.nb):
            continue
        nb = json.loads(nb_path.read_text(encoding="utf-8"))
        data = json.loads(metrics.read_text(encoding="utf-8"))
        strict = not is_scale_check(name)
        if args.action == "render":
            fresh = prose.render_notebook(nb, data, strict)
            if fresh != nb:
                writers.write_committed(nb_path, json.dumps(fresh, ensure_ascii=False, indent=1, sort_keys=True)
                                        + "\n", "prose", root)
                print(f"rendered {name}")
            continue
        for cell, shown, rendered in prose.stale_cells(nb, data, strict):
            problems += 1
            print(f"{name}, cell {cell}: its text differs from its template rendered from {label(metrics, root)}")
        for cell, number, context in unexcused(name, nb, exceptions):
            problems += 1
            print(f"{name}, cell {cell}: {number} is typed by hand ({context!r}): bind it to the run with a field "
                  f"{{{{...}}}} or list it in {EXCEPTIONS} with the reason")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

"""Every paper notebook ends with its exercises, and every command they give is one the runner accepts.

A notebook of ``notebooks/{tracing,alignment,redundancy,clusters}/`` ends with a Markdown cell ``## Exercises``
holding two or three numbered exercises. An exercise that runs something gives the whole command in backticks,
``python -m layersim.tools.runner --nb <stem> [-p NAME VALUE ...] [--scale ...] [--seeds N]``, and says how long it
takes on two cores, as an estimate. This file checks, without running any notebook:

- the command is read by the runner's own argument parser (``runner.main`` is stopped right after it parses, see
  :func:`runner_arguments`), and the runner's own checks before any work accept it (:func:`runner_refusal`:
  ``runner.main`` goes as far as it goes before it builds its job; it reads notebooks, it runs nothing);
- ``--nb`` selects exactly one notebook: this one, or another one that the exercise names;
- every ``-p NAME`` is a parameter of that notebook (``papermill.inspect_notebook``: its parameters cell, no
  execution), and every VALUE, read as the runner reads it (``plans.parse_value``), passes the notebook's own
  validation (:func:`validated_settings`: the parameters cell, then the setup cell up to its ``start(...)`` call with
  ``start`` replaced by :func:`settings_only`, which calls ``settings.pick`` as ``layersim.notebook.run.start`` does
  and stops there: the notebook's imports run, no data set, model or output folder is touched);
- the exercise states its time: a parenthesis holding a duration, "two cores" and the word "estimate".

Spans that look like part of a command (``-p spread 0.6``, ``--nb a03``) or another ``python`` command are refused:
an exercise gives the command a reader can paste.
"""

import argparse
import ast
import builtins
import contextlib
import functools
import io
import json
import os
import re
import shlex
import subprocess
import sys
import types
from pathlib import Path
from unittest import mock

import pytest

from layersim.notebook import run as run_module
from layersim.notebook import seeds, settings
from layersim.tools import plans, runner

ROOT = Path(__file__).resolve().parents[1]
PAPERS = ("tracing", "alignment", "redundancy", "clusters")
NOTEBOOKS = sorted(p for paper in PAPERS for p in (ROOT / "notebooks" / paper).glob("*.ipynb"))
IDS = [p.relative_to(ROOT / "notebooks").with_suffix("").as_posix() for p in NOTEBOOKS]

RUNNER = ("python", "-m", "layersim.tools.runner")
HEADING = "## Exercises"
ITEM = re.compile(r"^(\d+)\.\s", re.M)  # a numbered exercise starts at the beginning of a line
SPAN = re.compile(r"`([^`]+)`")  # a span may be wrapped over lines: Markdown reads the break as a space
PAREN = re.compile(r"\(([^()]*)\)")
DURATION = re.compile(r"\d+(?:\.\d+)?(?:\s*(?:–|-|to)\s*\d+(?:\.\d+)?)?\s*(?:s|min|h|seconds?|minutes?|hours?)\b")
TWO_CORES = re.compile(r"\b(?:two|2)\s+(?:CPU\s+)?cores\b", re.I)
#: libraries that load or build models; checking an exercise's settings must not import them
HEAVY = ("transformers", "timm", "open_clip", "sentence_transformers", "torchvision")


# ----------------------------------------------------------------------------- reading a notebook


def load(path: Path) -> dict:
    """The notebook's JSON; a committed notebook is read once per session."""
    path = Path(path)
    if path.is_relative_to(ROOT / "notebooks"):
        return _committed(path)
    return json.loads(path.read_text(encoding="utf-8"))


@functools.lru_cache(maxsize=None)
def _committed(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def source(cell: dict) -> str:
    return "".join(cell["source"])


def tags(cell: dict) -> list:
    return cell.get("metadata", {}).get("tags", [])


def exercises_cell(nb: dict) -> str:
    """The text of the notebook's ``## Exercises`` cell: its only one, and its last Markdown cell."""
    markdown = [source(c) for c in nb["cells"] if c["cell_type"] == "markdown"]
    found = [i for i, text in enumerate(markdown) if text.strip().splitlines()[:1] == [HEADING]]
    if len(found) != 1:
        raise ValueError(f"{len(found)} Markdown cells start with {HEADING!r}; a notebook has one")
    if found[0] != len(markdown) - 1:
        raise ValueError(f"the {HEADING!r} cell is not the notebook's last Markdown cell")
    return markdown[found[0]]


def exercises(text: str) -> list[str]:
    """The numbered exercises of an exercises cell, each with its continuation lines; ``ValueError`` where the
    numbers do not run 1, 2, ..."""
    starts = list(ITEM.finditer(text))
    numbers = [int(m.group(1)) for m in starts]
    if numbers != list(range(1, len(numbers) + 1)):
        raise ValueError(f"the exercises are numbered {numbers}, not 1, 2, ...")
    ends = [m.start() for m in starts[1:]] + [len(text)]
    return [text[m.start():end].strip() for m, end in zip(starts, ends)]


def commands(item: str) -> tuple[list[str], list[str]]:
    """``(runner commands, problems)`` of the backticked spans of one exercise."""
    found, problems = [], []
    for span in SPAN.findall(item):
        words = span.split()
        text = " ".join(words)
        if tuple(words[:3]) == RUNNER:
            found.append(text)
        elif words and (words[0] in ("python", "python3", "-p") or words[0].startswith("--")
                        or "layersim.tools.runner" in text):
            problems.append(f"`{text}` is not a whole runner command: give `{' '.join(RUNNER)} --nb <stem> ...`")
    return found, problems


def states_estimate(item: str) -> bool:
    """A parenthesis of the exercise holds a duration, "two cores" and "estimate"."""
    return any(DURATION.search(p) and TWO_CORES.search(p) and re.search(r"\bestimat", p, re.I)
               for p in PAREN.findall(item))


# ----------------------------------------------------------------------------- the runner's own parsing


class _Parsed(Exception):
    """Stops ``runner.main`` right after its parser has read the command line."""


class _Reached(Exception):
    """Stops ``runner.main`` where it would build its job: every check before any work has passed."""


def runner_arguments(argv: list[str]) -> argparse.Namespace:
    """``argv`` read by the runner's own parser: ``runner.main`` builds it, parses, and is stopped there.
    ``ValueError`` with the parser's message when it refuses the command line."""

    class Capturing(argparse.ArgumentParser):
        def parse_args(self, args=None, namespace=None):
            raise _Parsed(super().parse_args(args, namespace))

    patched = types.SimpleNamespace(**{**vars(argparse), "ArgumentParser": Capturing})
    err = io.StringIO()
    with mock.patch.object(runner, "argparse", patched), contextlib.redirect_stderr(err):
        try:
            runner.main(argv)
        except _Parsed as parsed:
            return parsed.args[0]
        except SystemExit:
            lines = err.getvalue().strip().splitlines()
            raise ValueError(f"the runner's parser refuses it: {lines[-1] if lines else 'no message'}") from None
    raise AssertionError("runner.main returned without parsing its command line")


def runner_refusal(argv: list[str]) -> str | None:
    """What the runner itself says against ``argv`` before any work (its checks of the options, the notebooks
    selected, their parameters, where the run would write), or None when it would start the run: ``runner.main``
    runs up to the point where it builds its job, which raises here. The environment is restored after it."""
    err, out = io.StringIO(), io.StringIO()
    with mock.patch.dict(os.environ), mock.patch.object(plans, "Job", side_effect=_Reached), \
            contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        try:
            code = runner.main(argv)
        except _Reached:
            return None
        except SystemExit:
            lines = err.getvalue().strip().splitlines()
            return lines[-1] if lines else "the runner exits"
    return f"the runner stops before any run (exit status {code}): {err.getvalue().strip() or out.getvalue().strip()}"


# ----------------------------------------------------------------------------- the notebook's own validation


def settings_only(notebook, presets, params, *, rules=None, derived=None, checks=(), style=True, announce=True,
                  **overrides):
    """``layersim.notebook.run.start`` up to its validation and no further: the same choice of settings from the
    notebook's variables and the same ``settings.pick`` call; no output folder, no seeding, no plot style.
    (:func:`test_settings_only_validates_as_start_does` holds the two together.)"""
    run_module.split_name(notebook)
    if "scale" not in params:
        raise ValueError("start needs the notebook's 'scale' (pass globals() after the parameters cell)")
    scale = params["scale"]
    given = {k: params[k] for k in presets.get(scale, {}) if k in params}
    given.update(overrides)
    P = settings.pick(presets, scale, seed=params.get("seed", 0), device=params.get("device", "auto"), rules=rules,
                      derived=derived, checks=checks, **given)
    return types.SimpleNamespace(notebook=notebook, scale=scale, P=P)


def calls_start(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "start"
               for n in ast.walk(node))


def setup_code(nb: dict) -> tuple[str, list[ast.stmt], ast.stmt]:
    """``(parameters cell, the setup cell's statements before start(...), the statement that calls it)``. Bare
    expressions before it (``torch.set_num_threads(1)``) are left out: they set nothing the settings read."""
    params = [source(c) for c in nb["cells"] if "parameters" in tags(c)]
    if len(params) != 1:
        raise ValueError(f"{len(params)} cells are tagged 'parameters'")
    setup = [source(c) for c in nb["cells"] if c["cell_type"] == "code" and "parameters" not in tags(c)
             and "injected-parameters" not in tags(c) and calls_start(ast.parse(source(c)))]
    if len(setup) != 1:
        raise ValueError(f"{len(setup)} code cells call start(...); the settings are checked in one")
    before = []
    for stmt in ast.parse(setup[0]).body:
        if calls_start(stmt):
            return params[0], before, stmt
        if not isinstance(stmt, ast.Expr):
            before.append(stmt)
    raise AssertionError("unreachable: the cell calls start(...)")


def validated_settings(nb: dict, scale: str, given: dict, name: str = "notebook") -> types.SimpleNamespace:
    """The notebook's settings at ``scale`` with the ``-p`` values ``given``, validated by its own rules:
    its parameters cell, the values assigned after it as papermill injects them, then its setup cell up to and
    including ``start(...)``, with ``start`` bound to :func:`settings_only` (after the cell's imports, which bind
    the real one). Raises the notebook's ``ValueError`` for a value it refuses."""
    params, before, call = setup_code(nb)
    ns = {"__builtins__": builtins, "__name__": "__exercise_check__"}
    exec(compile(params, f"<parameters cell of {name}>", "exec"), ns)  # noqa: S102 - the notebook's own cell
    ns.update(given)
    ns["scale"] = scale
    exec(compile(ast.Module(body=before, type_ignores=[]), f"<setup cell of {name}>", "exec"), ns)  # noqa: S102
    calls = []

    def start(*args, **kwargs):
        calls.append(settings_only(*args, **kwargs))
        return calls[-1]

    ns["start"] = start
    exec(compile(ast.Module(body=[call], type_ignores=[]), f"<start call of {name}>", "exec"), ns)  # noqa: S102
    if len(calls) != 1:
        raise AssertionError(f"the start(...) statement of {name} called start {len(calls)} times")
    return calls[0]


def parameter_names(path: Path) -> list[str]:
    import papermill as pm

    return list(pm.inspect_notebook(str(path)))


# ----------------------------------------------------------------------------- one command, one notebook


def label(path: Path) -> str:
    return Path(path).relative_to(ROOT / "notebooks").with_suffix("").as_posix()


def short(path: Path) -> str:
    """``a03`` for ``a03_circle``: how the text names a notebook."""
    return Path(path).stem.split("_")[0]


def command_problems(command: str, item: str, notebook: Path, read: dict[Path, Path]) -> list[str]:
    """What is wrong with one runner command of an exercise of ``notebook`` (``read``: the file to read for a
    notebook, where it is not the notebook itself: the fixtures below)."""
    argv = shlex.split(command)[len(RUNNER):]
    try:
        args = runner_arguments(argv)
    except ValueError as exc:
        return [f"`{command}`: {exc}"]
    problems = []
    if args.update_committed or args.refs or args.recover or args.list:
        return [f"`{command}`: an exercise runs a notebook into runs/; no --update-committed, --refs, --recover "
                "or --list"]
    try:
        selected = plans.discover(args.nb) if args.nb.strip() else []
    except ValueError as exc:
        return [f"`{command}`: {exc}"]
    if len(selected) != 1:
        return [f"`{command}`: --nb {args.nb!r} selects {len(selected)} notebooks; an exercise runs one"]
    target = selected[0]
    if target != notebook:
        prose = SPAN.sub("", item)
        if target.parent.name not in PAPERS or not re.search(rf"\b({short(target)}|{target.stem})\b", prose):
            problems.append(f"`{command}` runs {label(target)}, which the exercise does not name outside the command")
    scale = args.scale or "default"
    names = [name for name, _ in args.p]
    given = {name: plans.parse_value(value) for name, value in args.p}
    known = parameter_names(read.get(target, target))
    problems += [f"`{command}`: {label(target)} has no parameter {name!r}; its parameters are "
                 f"{', '.join(n for n in known if n != 'scale')}" for name in names if name not in known]
    if len(set(names)) != len(names):
        problems.append(f"`{command}`: a -p name is given twice")
    if "scale" in names:
        problems.append(f"`{command}`: the scale is set with --scale, not with -p scale")
    if args.scale_check:
        if names or scale != "default":
            problems.append(f"`{command}`: --scale-check runs the default scale with its own settings: "
                            "no -p, no --scale")
        if target.stem not in seeds.SCALE_CHECKS:
            problems.append(f"`{command}`: {label(target)} has no scale check")
        else:  # its larger settings pass the notebook's rules too
            given = dict(seeds.SCALE_CHECKS[target.stem])
    if problems:
        return problems
    try:
        started = validated_settings(load(read.get(target, target)), scale, given, label(target))
    except ValueError as exc:
        problems.append(f"`{command}`: {label(target)} refuses it: {exc}")
    else:
        if started.notebook != label(target):
            problems.append(f"`{command}`: the setup cell of {label(target)} starts {started.notebook!r}")
    if target in read:  # a fixture: the runner would read the committed notebook, not this one
        return problems
    refusal = runner_refusal(argv)
    if refusal:
        problems.append(f"`{command}`: the runner refuses it: {refusal}")
    return problems


def problems(notebook: Path, read: Path | None = None) -> list[str]:
    """Everything wrong with the exercises of ``notebook`` (read from ``read``, default the notebook itself)."""
    nb = load(read or notebook)
    try:
        items = exercises(exercises_cell(nb))
    except ValueError as exc:
        return [str(exc)]
    found = [] if 2 <= len(items) <= 3 else [f"{len(items)} numbered exercises; a notebook has two or three"]
    for k, item in enumerate(items, 1):
        cmds, bad = commands(item)
        found += [f"exercise {k}: {b}" for b in bad]
        for command in cmds:
            found += [f"exercise {k}: {p}" for p in
                      command_problems(command, item, notebook, {notebook: read} if read else {})]
        if (cmds or bad) and not states_estimate(item):
            found.append(f"exercise {k} runs a command but states no time on two cores labelled as an estimate, "
                         "e.g. (about 2 min on two cores, an estimate from the default run's 40 s)")
    return found


# ----------------------------------------------------------------------------- the committed notebooks


def test_every_paper_is_here():
    assert {p.parent.name for p in NOTEBOOKS} == set(PAPERS)


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=IDS)
def test_the_exercises_run_as_written(notebook):
    found = problems(notebook)
    assert not found, f"{label(notebook)}:\n" + "\n".join(found)


def test_checking_settings_loads_no_model_library():
    """The setup cells' imports are what checking a value costs: every notebook's defaults are validated in a fresh
    interpreter, which must not have imported a model library (and finishes in seconds)."""
    script = (
        "import json, sys\n"
        f"sys.path.insert(0, {str(ROOT / 'tests')!r})\n"
        "import test_exercises as t\n"
        "for nb in t.NOTEBOOKS:\n"
        "    t.validated_settings(t.load(nb), 'default', {}, t.label(nb))\n"
        "print(json.dumps(sorted(m for m in t.HEAVY if m in sys.modules)))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []


def test_settings_only_validates_as_start_does(tmp_path, monkeypatch):
    """The stand-in for ``start`` takes the same arguments and gives the same settings and the same refusals as
    ``layersim.notebook.run.start`` (with its output folder and seeding switched off here)."""
    import inspect

    assert list(inspect.signature(settings_only).parameters) == list(inspect.signature(run_module.start).parameters)
    monkeypatch.setattr(run_module.results, "output_dir", lambda paper, stem, scale: tmp_path)
    monkeypatch.setattr(run_module, "seed_everything", lambda seed: None)
    presets = {"default": {"spread": 0.3, "steps": 10}, "smoke": {"spread": 0.3, "steps": 2}}
    rules = {"spread": settings.real(0)}
    for params in ({"scale": "default"}, {"scale": "smoke", "spread": 1}, {"scale": "default", "steps": None},
                   {"scale": "default", "seed": 3, "device": "cpu", "other": "ignored"}):
        real = run_module.start("alignment/a03_circle", presets, params, rules=rules, style=False, announce=False)
        assert settings_only("alignment/a03_circle", presets, params, rules=rules).P == real.P
    for params in ({"scale": "default", "spread": -1.0}, {"scale": "default", "steps": 0},
                   {"scale": "default", "seed": -1}, {"scale": "huge"}):
        with pytest.raises(ValueError) as real:
            run_module.start("alignment/a03_circle", presets, params, rules=rules, style=False, announce=False)
        with pytest.raises(ValueError) as ours:
            settings_only("alignment/a03_circle", presets, params, rules=rules)
        assert str(ours.value) == str(real.value)


# ----------------------------------------------------------------------------- the checks catch what they should

A03 = ROOT / "notebooks" / "alignment" / "a03_circle.ipynb"
KERNEL = {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
          "language_info": {"name": "python"}}
ESTIMATE = "(about 20 s on two cores, an estimate from the default run's 6 s per seed)"


def fixture_notebook(exercise_lines: list[str]) -> dict:
    """A notebook shaped like the project's: parameters cell, setup cell calling ``start`` with its rules, findings,
    then an exercises cell made of ``exercise_lines``."""
    def code(text, tags=()):
        return {"cell_type": "code", "id": f"code-{len(text)}", "metadata": {"tags": list(tags)},
                "execution_count": None, "outputs": [], "source": text.splitlines(keepends=True)}

    def markdown(text):
        return {"cell_type": "markdown", "id": f"markdown-{len(text)}", "metadata": {},
                "source": text.splitlines(keepends=True)}

    return {"nbformat": 4, "nbformat_minor": 5, "metadata": KERNEL, "cells": [
        code('from typing import Optional\n\nscale: str = "default"\nseed: int = 0\ndevice: str = "auto"\n'
             "spread: Optional[float] = None  # s.d. of the angular noise\nsteps: Optional[int] = None\n",
             tags=["parameters"]),
        code("from layersim.notebook import settings\nfrom layersim.notebook.run import start\n\n"
             'PRESETS = {s: dict(spread=0.3, steps=300) for s in ("smoke", "default", "paper")}\n'
             'RULES = {"spread": settings.real(0)}\n'
             'run = start("alignment/a03_circle", PRESETS, globals(), rules=RULES)\nP = run.P\nP\n'),
        markdown("## What we found (default scale)\n\nThe clusters separate.\n"),
        markdown("## Exercises\n\n" + "\n".join(exercise_lines) + "\n"),
    ]}


def fixture_problems(tmp_path, exercise_lines):
    path = tmp_path / "a03_circle.ipynb"
    path.write_text(json.dumps(fixture_notebook(exercise_lines), indent=1))
    return problems(A03, read=path)


GOOD = [f"1. **Noise.** Double it: `python -m layersim.tools.runner --nb a03 -p spread 0.6` {ESTIMATE}.",
        "2. **By hand.** Compute $\\sigma_2/\\sigma_1$ with `layersim.measures.alignment.svd`."]


def test_a_good_fixture_passes(tmp_path):
    assert fixture_problems(tmp_path, GOOD) == []


def test_a_wrong_parameter_name_fails(tmp_path):
    found = fixture_problems(tmp_path, [GOOD[0].replace("-p spread", "-p sprad"), GOOD[1]])
    assert len(found) == 1 and "has no parameter 'sprad'" in found[0], found


def test_a_value_the_rules_refuse_fails(tmp_path):
    found = fixture_problems(tmp_path, [GOOD[0].replace("spread 0.6", "spread -0.6"), GOOD[1]])
    assert len(found) == 1 and "refuses it: parameter 'spread': -0.6 is not allowed" in found[0], found
    # a word is read as a string, which a number's rule refuses
    found = fixture_problems(tmp_path, [GOOD[0].replace("spread 0.6", "spread wide"), GOOD[1]])
    assert len(found) == 1 and "parameter 'spread': 'wide' is not allowed" in found[0], found


def test_a_missing_estimate_fails(tmp_path):
    for without in (GOOD[0].replace(ESTIMATE, ""), GOOD[0].replace("an estimate", "measured"),
                    GOOD[0].replace("on two cores", "")):
        found = fixture_problems(tmp_path, [without, GOOD[1]])
        assert len(found) == 1 and "states no time on two cores labelled as an estimate" in found[0], found


def test_the_count_the_command_and_the_notebook_are_checked(tmp_path):
    assert "1 numbered exercises" in fixture_problems(tmp_path, GOOD[:1])[0]
    assert "numbered [1, 3]" in fixture_problems(tmp_path, [GOOD[0], GOOD[1].replace("2.", "3.", 1)])[0]
    part = fixture_problems(tmp_path, [f"1. **Noise.** Run `-p spread 0.6` {ESTIMATE}.", GOOD[1]])
    assert len(part) == 1 and "not a whole runner command" in part[0], part
    many = fixture_problems(tmp_path, [GOOD[0].replace("--nb a03", "--nb a0"), GOOD[1]])
    assert len(many) == 1 and "--nb 'a0' selects" in many[0] and "runs one" in many[0], many
    other = fixture_problems(tmp_path, [GOOD[0].replace("--nb a03 -p spread 0.6", "--nb a06 -p share_50 0.3"),
                                        GOOD[1]])
    assert len(other) == 1 and "does not name" in other[0], other
    named = [GOOD[0].replace("--nb a03 -p spread 0.6", "--nb a06 -p share_50 0.3").replace("Double it", "In a06"),
             GOOD[1]]
    assert fixture_problems(tmp_path, named) == []
    option = fixture_problems(tmp_path, [GOOD[0].replace("--nb", "--notebook"), GOOD[1]])
    assert len(option) == 1 and "the runner's parser refuses it" in option[0], option
    scale = fixture_problems(tmp_path, [GOOD[0].replace("-p spread 0.6", "-p scale paper"), GOOD[1]])
    assert len(scale) == 1 and "scale" in scale[0], scale

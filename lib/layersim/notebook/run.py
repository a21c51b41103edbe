"""One notebook run: its settings, its output folder, its figures and its claims, in three calls::

    run = start("alignment/a06_convergence", PRESETS, globals(), rules=cv.RULES)  # settings + output folder
    run.finish(fig, "fig9a_alignment")                                          # save + show a figure
    run.record(claims, sigma_top=sigma[:60])                                     # metrics.json + claims table

:func:`start` validates the notebook's parameters (:func:`layersim.notebook.settings.pick`), picks the output
folder, seeds every generator and applies the plot style :data:`STYLE`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from layersim.notebook import registry, rehearsal, results, seeds, settings
from layersim.train import checkpoints
from layersim.train.training import seed_everything

#: the project's matplotlib style, applied by :func:`start` (and usable alone: ``plt.style.use(STYLE)``)
STYLE = Path(__file__).with_name("layersim.mplstyle")


@dataclass
class Run:
    """A notebook's run: ``notebook`` (``"<paper>/<stem>"``), ``scale``, validated settings ``P`` (the
    preset's keys; ``seed`` and ``device`` are :attr:`seed` and :attr:`device`), output folder ``out``."""

    notebook: str
    scale: str
    P: dict
    seed: int
    device: str
    out: Path
    figures: list[str] = field(default_factory=list)
    claims: dict = field(default_factory=dict)  # the claims as :meth:`record` judged and wrote them
    rehearsal: dict | None = None  # a rehearsal of the paper scale: what it cut (written into metrics.json)

    def finish(self, fig, name: str, show: bool = True) -> None:
        """Save ``fig`` as ``<out>/<name>.png``, show it and close it; returns None, so a cell ending in it shows
        the figure once."""
        import matplotlib.pyplot as plt

        results.save_figure(fig, self.out, name)
        self.figures.append(name)
        if show:
            plt.show()
        plt.close(fig)

    def record(self, claims: Mapping[str, dict], extra_settings: Mapping[str, Any] | None = None,
               show: bool = True, **measured: Any) -> dict:
        """Write ``<out>/metrics.json`` (settings with ``seed`` and ``extra_settings``, ``claims``, every
        ``measured`` number), show the claims table and the checkpoints trained or loaded; returns the claims as
        recorded (also :attr:`claims`).

        Each claim is judged against its registered op and threshold (:func:`layersim.notebook.registry.judge`) over
        this seed and the seed runs named in ``$LAYERSIM_SEED_RUNS`` (:func:`layersim.notebook.seeds.combine`).
        """
        params = {**self.P, "seed": self.seed, **(extra_settings or {})}
        claims = registry.judge(self.notebook, dict(claims))
        results.check_claims(claims)
        others = seeds.load_runs(seeds.folders_from_env(os.environ.get(seeds.ENV)))
        claims = seeds.combine(self.notebook, self.scale, results.to_jsonable(params), claims, others)
        if seeds.wall_times(others):
            measured = {**measured, "seed_run_seconds": seeds.wall_times(others)}
        if self.rehearsal is not None:
            measured = {**measured, rehearsal.KEY: self.rehearsal}
        used = checkpoints.uses()
        if used["loaded"] or used["trained"]:  # which checkpoints this run trained and which it loaded: a run fact
            measured = {**measured, "from_cache": used}
        results.write_metrics(self.out, self.notebook, self.scale, params, claims, **measured)
        self.claims = claims
        if show:
            from IPython.display import Markdown, display

            display(Markdown(results.claims_table(claims)))
        return claims

    @contextmanager
    def measuring(self) -> Iterator[None]:
        """The block that measures the paper's claims and records them (:meth:`record`).

        Outside a rehearsal of the paper scale it changes nothing. In a rehearsal (random weights, fixture data,
        counts cut to seconds) some measurements are undefined by design, for instance a rank correlation with a
        layer-wise accuracy that is the same at every layer, and raise a ``ValueError``: the block's first such error
        is then written into ``metrics.json`` as not measurable in a rehearsal, with its message
        (:func:`layersim.notebook.rehearsal.not_measurable`), no claim is recorded and the notebook goes on, so its
        later cells are rehearsed too. Any other exception still stops the run.
        """
        try:
            yield
        except ValueError as err:
            if self.rehearsal is None:
                raise
            self.rehearsal = rehearsal.not_measurable(self.rehearsal, str(err))
            self.record({}, show=False)
            print(f"claims not measurable in a rehearsal: {err}")


def shown_path(path: Path) -> str:
    """``path`` as a notebook output shows it: relative to the repository when inside it, else as it is."""
    from layersim.core.paths import find_root

    root = find_root()
    try:
        return Path(path).resolve().relative_to(root.resolve()).as_posix() if root else str(path)
    except ValueError:
        return str(path)


def split_name(notebook: str) -> tuple[str, str]:
    """``"<paper>/<stem>"`` -> ``(paper, stem)``; a ``ValueError`` for anything else."""
    paper, sep, stem = notebook.partition("/")
    if not sep or not paper or not stem or "/" in stem:
        raise ValueError(f"a notebook is named '<paper>/<stem>', got {notebook!r}")
    return paper, stem


def start(notebook: str, presets: Mapping[str, Mapping[str, Any]], params: Mapping[str, Any], *,
          rules: Mapping[str, settings.Rule] | None = None, derived: Mapping[str, Callable[[dict], Any]] | None = None,
          checks: Iterable[Callable[[dict], None]] = (), style: bool = True, announce: bool = True,
          **overrides: Any) -> Run:
    """Begin the run of ``notebook`` (``"<paper>/<stem>"``) at ``params["scale"]``; returns a :class:`Run`.

    ``params``: the notebook's ``globals()`` (``scale``, ``seed`` = 0, ``device`` = ``"auto"``, each preset key,
    None meaning the preset's). ``overrides`` win over ``params``; ``rules``, ``derived``, ``checks`` go to
    :func:`~layersim.notebook.settings.pick`; ``announce`` prints scale and output folder.
    """
    paper, stem = split_name(notebook)
    if "scale" not in params:
        raise ValueError("start needs the notebook's 'scale' (pass globals() after the parameters cell)")
    scale = params["scale"]
    rehearsing = scale == "paper" and rehearsal.active()
    cut = rehearsal.cuts_of(stem, presets) if rehearsing else {}
    if rehearsing:  # the paper preset with the rehearsal's counts; what was cut goes into metrics.json
        presets = {**presets, "paper": {**presets["paper"], **cut}}
    given = {k: params[k] for k in presets.get(scale, {}) if k in params}
    given.update(overrides)
    seed, device = params.get("seed", 0), params.get("device", "auto")
    P = settings.pick(presets, scale, seed=seed, device=device, rules=rules, derived=derived, checks=checks, **given)
    out = results.output_dir(paper, stem, scale)
    seed_everything(int(seed))
    checkpoints.forget_uses()  # the record of this run's checkpoints (Run.record writes it as ``from_cache``)
    if style:
        import matplotlib.pyplot as plt

        plt.style.use(STYLE)
    if announce:
        print(f"scale={scale}{' (a rehearsal: counts cut, fixture data)' if rehearsing else ''}, writing to "
              f"{shown_path(out)}")
    return Run(notebook=notebook, scale=scale, P=P, seed=int(seed), device=settings.check_value("device", device),
               out=out, rehearsal=rehearsal.mark(cut) if rehearsing else None)

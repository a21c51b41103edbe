"""Tests of layersim.notebook.ladder_report: a paper's ladder claims read from fake rungs in a temporary results
folder (values, seconds, statuses, order by budget, the other papers' claims left out), the table, the findings and
the figure, and the empty case of ladders that have not run."""

import json

import pytest

from builders import REPO, write_metrics_json
from layersim.notebook import ladder_report, ladders, seeds

A05 = ("alignment/a05_layers", "later_layers_more_aligned_after_training")
T03 = ("tracing/t03_aligned_training", "uniform_weights_hurt_last_layer")


def write_rung(folder, ladder, budget, notebook, claim, values, threshold=0.0, op=">", own=None, others=None):
    """A rung as the runner leaves it: ``metrics.json`` with the claim over the seeds (each seed judged against the
    threshold, the majority deciding) and the other seeds' times, and ``wall_time.json`` with the own seed's."""
    verdicts = [v > threshold if op == ">" else v < threshold for v in values]
    k = sum(verdicts)
    claim_ = {"value": sorted(values)[len(values) // 2], "values": values, "verdicts": verdicts, "threshold": threshold,
              "op": op, "holds": 2 * k > len(values), "n": len(values), "k": k}
    payload = {"notebook": notebook, "claims": {claim: claim_}, **({"seed_run_seconds": others} if others else {})}
    path = write_metrics_json(ladders.rung_folder(folder, ladder, budget), notebook, payload)
    if own is not None:
        (path.parent / seeds.WALL_TIME).write_text(json.dumps({"seconds": own}))
    return path


@pytest.fixture
def a05_trending(tmp_path):
    """The a05 ladder's three rungs, written largest first: mean margins -0.3, -0.2, -0.1 (seeds' spread 0.01)."""
    for budget, values in ((1797, [-0.11, -0.10, -0.09]), (450, [-0.31, -0.30, -0.29]), (900, [-0.21, -0.20, -0.19])):
        write_rung(tmp_path, "a05_regression_points", budget, *A05, values, own=10.0, others={"1": 11.5, "2": 12.5})
    return tmp_path


def test_a_rungs_seconds_are_its_own_seeds_and_the_others(tmp_path):
    write_rung(tmp_path, "x", 100, "p/n", "c", [0.1, 0.2, 0.3], own=40.0, others={"1": 50.0, "2": 61.5})
    assert ladder_report.rung_seconds(tmp_path, "x", 100, "p/n") == pytest.approx(151.5)
    write_rung(tmp_path, "x", 200, "p/n", "c", [0.1], own=7.0)  # one seed: its own time alone
    assert ladder_report.rung_seconds(tmp_path, "x", 200, "p/n") == pytest.approx(7.0)
    write_rung(tmp_path, "x", 400, "p/n", "c", [0.1, 0.2, 0.3], others={"1": 5.0})  # no wall_time.json
    assert ladder_report.rung_seconds(tmp_path, "x", 400, "p/n") is None
    assert ladder_report.rung_seconds(tmp_path, "x", 800, "p/n") is None  # not run


def test_rows_hold_each_rung_by_budget_with_its_mean_seeds_and_seconds(a05_trending):
    rows = ladder_report.ladder_rows(a05_trending, "alignment")
    a05 = next(r for r in rows if (r["notebook"], r["claim"]) == A05)
    assert a05["ladder"] == "a05_regression_points" and a05["planned"] == [450, 900, 1797]
    assert [g["budget"] for g in a05["rungs"]] == [450.0, 900.0, 1797.0]
    assert [g["mean"] for g in a05["rungs"]] == pytest.approx([-0.3, -0.2, -0.1])
    assert a05["rungs"][0]["values"] == [-0.31, -0.30, -0.29]
    assert [(g["k"], g["n"], g["holds"]) for g in a05["rungs"]] == [(0, 3, False)] * 3
    assert [g["seconds"] for g in a05["rungs"]] == pytest.approx([34.0] * 3) and a05["seconds"] == pytest.approx(102.0)
    assert (a05["threshold"], a05["op"]) == (0.0, ">")
    status = a05["status"]  # gains 0.2 over a spread of 0.01 and still at the last step: trending
    assert status["status"] == "trending" and status["rungs"] == 3
    assert status["gain"] == pytest.approx(0.2) and status["spread"] == pytest.approx(0.01)
    assert status["crossing_budget"] == pytest.approx(3594, rel=0.01)  # about one doubling past 1797 at 0.1 each


def test_a_ladder_that_has_not_run_is_not_yet_retested_with_its_planned_rungs(a05_trending):
    rows = ladder_report.ladder_rows(a05_trending, "alignment")
    a10 = [r for r in rows if r["ladder"] == "a10_none_images"]
    assert [r["claim"] for r in a10] == [claim for _, claim in ladders.LADDERS["a10_none_images"].claims]
    for r in a10:
        assert r["rungs"] == [] and r["planned"] == [6000, 12000, 24000, 48000] and r["seconds"] is None
        assert r["status"]["status"] == "not yet retested" and r["status"]["why"].startswith("no rung has run yet")
        assert r["threshold"] is None


def test_only_the_papers_own_claims_are_rows(a05_trending):
    write_rung(a05_trending, "t03_ablation_budget", 30000, *T03, [0.1, 0.2, 0.3])
    write_rung(a05_trending, "bert_steps", 100, "tracing/t09_aligned_bert", "aligned_bert_better_intermediate", [0.1])
    alignment = ladder_report.ladder_rows(a05_trending, "alignment")
    assert {r["notebook"].split("/")[0] for r in alignment} == {"alignment"} and len(alignment) == 4
    tracing = ladder_report.ladder_rows(a05_trending, "tracing")
    assert [(r["notebook"], r["claim"]) for r in tracing] == [T03, ("tracing/t09_aligned_bert",
                                                                    "aligned_bert_better_intermediate")]
    assert [len(r["rungs"]) for r in tracing] == [1, 1]
    clusters = ladder_report.ladder_rows(a05_trending, "clusters")  # bert_steps judges t09 too: not a clusters row
    assert [r["notebook"] for r in clusters] == ["clusters/c03_layer_skipping", "clusters/c01_cka_structure"]
    assert all(r["rungs"] == [] for r in clusters)
    assert ladder_report.ladder_rows(a05_trending, "no_paper") == []
    assert list(ladder_report.paper_ladders("alignment")) == ["a05_regression_points", "a10_none_images"]
    assert ladder_report.paper_ladders("clusters")["bert_steps"]["claims"] == [
        "c03_layer_skipping/single_late_skips_cheap", "c01_cka_structure/ft_block_diagonal"]


def test_the_table_shows_rungs_means_status_and_seconds(a05_trending):
    text = ladder_report.markdown(ladder_report.ladder_rows(a05_trending, "alignment"))
    a05 = next(line for line in text.splitlines() if "a05_layers" in line)
    cells = [c.strip() for c in a05.strip("|").split("|")]
    assert cells[2] == "450, 900, 1797 / 450, 900, 1797"
    assert cells[3] == "450: -0.300 (0/3); 900: -0.200 (0/3); 1797: -0.100 (0/3)"
    assert cells[4] == "**trending**" and cells[5].startswith("gains more than the spread") and cells[6] == "102"
    a10 = [line for line in text.splitlines() if "a10_negative_transfer" in line]
    assert len(a10) == 3 and all("| – / 6000, 12000, 24000, 48000 | – | **not yet retested** |" in a for a in a10)
    assert "What must hold" not in text  # neither alignment ladder has checks
    clusters = ladder_report.markdown(ladder_report.ladder_rows(a05_trending, "clusters"))
    assert clusters.count("What must hold of a rung of `bert_steps`") == 1
    assert clusters.count("\n- ") == len(ladders.LADDERS["bert_steps"].checks)
    assert ladder_report.markdown([]) == "No claim of this paper has a ladder."


def test_the_findings_count_the_statuses(a05_trending, tmp_path_factory):
    found = ladder_report.findings(ladder_report.ladder_rows(a05_trending, "alignment"))
    assert found.startswith("Claims with rungs: 1 of 4; by status: not yet retested 3, trending 1.")
    assert "`later_layers_more_aligned_after_training` (`a05_regression_points`, 3 of 3 rungs): *trending*" in found
    empty = ladder_report.findings(ladder_report.ladder_rows(tmp_path_factory.mktemp("none"), "redundancy"))
    assert empty.startswith("No rung of `r04_vit_width` has run yet: the claim it judges is *not yet retested*.")
    both = ladder_report.findings(ladder_report.ladder_rows(tmp_path_factory.mktemp("none"), "tracing"))
    assert both.startswith("No rung of `t03_ablation_budget` and `bert_steps` has run yet: the 2 claims they judge are")
    keys = ladder_report.key_numbers(ladder_report.ladder_rows(a05_trending, "alignment"))
    assert keys["statuses"]["a05_layers/later_layers_more_aligned_after_training"] == "trending"
    assert keys["rungs_run"]["a10_negative_transfer/random_label_pretraining_hurts"] == 0


def test_the_figure_has_one_panel_per_claim_with_a_rung_and_none_without(a05_trending, tmp_path_factory):
    import matplotlib.pyplot as plt

    write_rung(a05_trending, "a10_none_images", 6000, "alignment/a10_negative_transfer",
               "random_label_pretraining_hurts", [0.1, 0.2, 0.3])
    fig = ladder_report.figure(ladder_report.ladder_rows(a05_trending, "alignment"))
    shown = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_title() for ax in shown] == [
        "a05_layers: later_layers_more_aligned_after_training\nstatus: trending",
        "a10_negative_transfer: random_label_pretraining_hurts\nstatus: not yet retested"]
    assert [t.get_text() for t in shown[0].get_xticklabels()] == ["450", "900", "1797"]
    assert shown[0].get_xlabel() == "regression points (digits)"
    plt.close(fig)
    assert ladder_report.figure(ladder_report.ladder_rows(tmp_path_factory.mktemp("none"), "alignment")) is None


def test_the_folder_setting_reads_the_committed_figures_or_a_folder_of_the_repository(tmp_path):
    from layersim.notebook import settings

    assert ladder_report.results_folder(None) == (REPO / "figures").resolve()
    assert ladder_report.results_folder("runs/default") == (REPO / "runs" / "default").resolve()
    assert ladder_report.results_folder(str(tmp_path)) == tmp_path.resolve()
    assert settings.check_value("ladders_folder", str(tmp_path), ladder_report.RULES) == str(tmp_path)
    assert settings.check_value("ladders_folder", None, ladder_report.RULES) is None
    for bad in (str(tmp_path / "missing"), "", 3):
        with pytest.raises(ValueError, match="parameter 'ladders_folder'"):
            settings.check_value("ladders_folder", bad, ladder_report.RULES)

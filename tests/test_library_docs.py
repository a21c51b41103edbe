"""The library page's Python (docs/library.md) runs as written, offline, and the top-level names it shows are the
functions of their modules, imported on first use: ``import layersim`` imports neither torch nor numpy."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from layersim.inputs import locate

PAGE = Path(__file__).resolve().parents[1] / "docs" / "library.md"
BLOCKS = re.findall(r"^```python\n(.*?)^```", PAGE.read_text(), re.M | re.S)


def test_the_page_leads_with_the_python_api():
    text = PAGE.read_text()
    assert len(BLOCKS) >= 2 and text.index("```python") < text.index("## Layout")
    assert "layersim.analyze(" in BLOCKS[0] and "register_model" in BLOCKS[1]


@pytest.mark.skipif(not (locate.is_available("all-minilm-l6-v2") and locate.is_available("janeaustenr")),
                    reason="MiniLM or the Austen novels are not installed (make assets)")
@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_every_python_block_of_the_page_runs(index, tmp_path, monkeypatch, capsys):
    """Each block in a fresh namespace, in a folder of its own; an adapter it registers is gone after."""
    import matplotlib

    from layersim.nets import adapters

    matplotlib.use("Agg")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(adapters, "REGISTRY", list(adapters.REGISTRY))
    namespace: dict = {"__name__": f"library_md_block_{index}"}
    exec(compile(BLOCKS[index], f"docs/library.md, python block {index + 1}", "exec"), namespace)
    rep = namespace["rep"]
    assert rep.results and capsys.readouterr().out
    assert rep.cka.shape == (len(rep.layers), len(rep.layers))
    if index == 0:  # MiniLM: no head, the CLS token of the embedding output left out
        assert rep.layers == [1, 2, 3, 4, 5, 6] and set(rep.skipped) == {"logit_lens/accuracy", "logit_lens/saturation"}


def test_import_layersim_is_light_and_its_names_are_their_modules_functions():
    code = ("import sys, layersim\nassert 'torch' not in sys.modules and 'numpy' not in sys.modules\n"
            "from layersim.measures import similarity\nassert layersim.cka is similarity.linear_cka\n"
            "assert layersim.layer_matrix is similarity.layer_matrix and 'torch' not in sys.modules\n"
            "import layersim.analysis.layer_report as lr, layersim.nets.adapters as ad, layersim.nets.models as m\n"
            "assert layersim.analyze is lr.analyze and layersim.register_model is ad.register_model\n"
            "assert layersim.collect is m.collect and set(layersim.API) <= set(dir(layersim))\n"
            "try:\n    layersim.nope\nexcept AttributeError as e:\n    assert 'no attribute' in str(e)\n"
            "else:\n    raise SystemExit('no error')\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr

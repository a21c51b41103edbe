"""The command lines' selections under hostile and careless input: every selection is checked before any work.

A lens subset, a Ray address, a device name, a cache or data folder and every path a command reads or writes are
validated before a model loads, a kernel starts or Ray connects. Each case asserts what a user must see: one line
that names the problem (no traceback), a non-zero exit for a command line, nothing written into the committed
results (``figures/``, ``notebooks/``, ``tests/notebooks/``) and no temporary file left behind; ``~`` and relative
paths mean the same file to every command (``layersim.core.writers.resolved``). The helpers are those of
``test_hostile_inputs.py``; CONTRIBUTING says how to add a case.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from builders import one_line_error
from layersim.core import device, paths, writers
from layersim.notebook import lenses
from layersim.tools import batch, report
from builders import temporaries, tree_files

MINILM = "all-minilm-l6-v2"
REPORT = ["report", "--model", MINILM, "--data", "austen"]


@pytest.fixture
def repo(tmp_path, monkeypatch):
    """A repository of its own (committed figures/, notebooks/ and tests/notebooks/), the switch off, no
    LAYERSIM_OUT, LAYERSIM_CACHE or LAYERSIM_DATA, and the working directory outside it."""
    root = tmp_path / "repo"
    (root / "lib" / "layersim").mkdir(parents=True)
    (root / "pyproject.toml").write_text("")
    for folder in ("figures/p/n", "notebooks/p", "tests/notebooks/p"):
        (root / folder).mkdir(parents=True)
    (root / "figures" / "p" / "n" / "metrics.json").write_text('{"committed": true}')
    monkeypatch.setenv("LAYERSIM_ROOT", str(root))
    for name in ("LAYERSIM_OUT", "LAYERSIM_CACHE", "LAYERSIM_DATA", writers.SWITCH):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    return root


def _committed(root: Path) -> dict[str, bytes]:
    """Every file under the committed folders of ``root``."""
    return {name: data for folder in ("figures", "notebooks", "tests") for name, data in tree_files(root / folder).items()}


def _refused(argv: list[str], capsys, *words: str) -> str:
    """Run ``python -m layersim`` with ``argv``: exit 2 and one ``error:`` line holding ``words`` (returned)."""
    from layersim.__main__ import main

    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    return one_line_error(capsys.readouterr().err, *words)


@pytest.fixture
def kernel(monkeypatch):
    """papermill's execution replaced by a recorder: what a report would hand its kernel (the parameters and the
    path variables of the environment), without running it."""
    import papermill

    seen: dict = {}

    def record(source, target, parameters=None, **kwargs):
        seen["parameters"] = dict(parameters or {})
        seen["environ"] = {k: os.environ.get(k) for k in paths.VARIABLES}
        seen["cwd"] = kwargs.get("cwd")
        raise RuntimeError("recorded, not run")

    monkeypatch.setattr(papermill, "execute_notebook", record)
    return seen


# ----------------------------------------------------------------------------- lenses


def test_an_unknown_lens_is_refused_before_any_work_listing_the_known_ones(repo, capsys):
    line = _refused([*REPORT, "--lenses", "cos/adjacent,cka/matix", "--out", str(repo / "out")], capsys,
                    "unknown lens 'cka/matix'", "cos/adjacent", "residual/norm_ratio")
    assert all(name in line for name in lenses.names())
    assert not (repo / "out").exists()


def test_the_last_cell_shows_only_the_lenses_that_ran():
    """The report's last cell read ``cka/to_last`` and ``cos/to_last`` whatever ``--lenses`` chose: a subset without
    them ran every lens and failed there, at the end."""
    rng = np.random.default_rng(0)
    data = lenses.LayerData(hidden=rng.standard_normal((3, 12, 4)), labels=None, layers=[1, 2, 3])
    r = report.run_lenses(report.Report(data, meta={}), ["cos/adjacent", "alignment/area"])
    assert report.key_numbers(r) == {"layers": 3, "ran": ["cos/adjacent"], "skipped": ["alignment/area"]}
    full = report.run_lenses(report.Report(data, meta={}), ["cka/to_last", "cos/to_last"])
    numbers = report.key_numbers(full)
    assert list(numbers) == ["layers", "ran", "skipped", "cka_to_last", "cos_to_last"]
    np.testing.assert_array_equal(numbers["cka_to_last"], full.results["cka/to_last"])


# ----------------------------------------------------------------------------- Ray addresses


def _closed_port() -> int:
    """A local port that was just bound and closed again: nothing listens there."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("address, words", [
    ("", ("empty",)),
    ("headnode", ("'headnode'", "host:port")),
    ("headnode:", ("'headnode:'", "host:port")),
    (":6379", ("':6379'", "host:port")),
    ("headnode:port", ("'headnode:port'", "port")),
    ("headnode:0", ("'headnode:0'", "1-65535")),
    ("headnode:70000", ("'headnode:70000'", "1-65535")),
    ("http://headnode:6379", ("'http://headnode:6379'", "ray://host:port")),
    ("ray://", ("'ray://'", "host:port")),
    ("head node:6379", ("'head node:6379'", "host:port")),
])
def test_a_malformed_address_is_refused_at_once(address, words):
    t0 = time.perf_counter()
    with pytest.raises(ValueError) as info:
        batch.check_address(address)
    assert time.perf_counter() - t0 < 1 and "\n" not in str(info.value)
    for word in words:
        assert word in str(info.value)


@pytest.mark.parametrize("scheme", ["", "ray://"])
def test_a_closed_port_is_refused_within_seconds(scheme):
    """The batch retried a refused connection for minutes; now one TCP attempt says that nothing listens."""
    port = _closed_port()
    t0 = time.perf_counter()
    with pytest.raises(ValueError, match=f"nothing listens at 127.0.0.1:{port}"):
        batch.check_address(f"{scheme}127.0.0.1:{port}")
    assert time.perf_counter() - t0 < 3.5


def test_an_address_that_does_not_answer_is_refused_after_the_timeout(monkeypatch):
    """A host that drops the connection (simulated: the network here may answer for any address)."""
    asked = []

    def silent(address, timeout=None):
        asked.append(timeout)
        raise TimeoutError("timed out")

    monkeypatch.setattr(socket, "create_connection", silent)
    with pytest.raises(ValueError, match="nothing listens at headnode:6379 \\(no answer within 3 s\\)"):
        batch.check_address("headnode:6379")
    assert asked == [batch.CONNECT_TIMEOUT] == [3.0]


def test_an_unknown_host_is_named(monkeypatch):
    def unknown(address, timeout=None):
        raise socket.gaierror(-2, "Name or service not known")

    monkeypatch.setattr(socket, "create_connection", unknown)
    with pytest.raises(ValueError, match="no host 'headnode' is known \\(Name or service not known\\)"):
        batch.check_address("ray://headnode:10001")


def test_a_listening_address_passes():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        assert batch.check_address(f"127.0.0.1:{port}") == f"127.0.0.1:{port}"
        assert batch.check_address(f" ray://127.0.0.1:{port} ") == f"ray://127.0.0.1:{port}"
    assert batch.check_address(None) is None  # no address: a local instance, nothing to reach


def test_auto_needs_a_cluster_that_ray_can_find(tmp_path, monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path))
    with pytest.raises(ValueError, match="no Ray cluster to find.*RAY_ADDRESS.*ray_current_cluster"):
        batch.check_address("auto")
    port = _closed_port()
    (tmp_path / "ray").mkdir()
    (tmp_path / "ray" / "ray_current_cluster").write_text(f"127.0.0.1:{port}\n")  # a cluster that has stopped
    with pytest.raises(ValueError, match=f"nothing listens at 127.0.0.1:{port}.*ray_current_cluster"):
        batch.check_address("auto")
    monkeypatch.setenv("RAY_ADDRESS", "headnode")
    with pytest.raises(ValueError, match="RAY_ADDRESS='headnode'"):
        batch.check_address("auto")
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.1:{server.getsockname()[1]}")
        assert batch.check_address("auto") == "auto"


def test_the_batch_refuses_a_closed_port_before_ray_starts(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # Ray is never imported, let alone connected
    t0 = time.perf_counter()
    with pytest.raises(ValueError, match="nothing listens"):
        batch.run([Path("notebooks/p/n.ipynb")], lambda nb, say: {}, "smoke", jobs=2,
                  address=f"127.0.0.1:{_closed_port()}")
    assert time.perf_counter() - t0 < 3.5


def test_the_runner_refuses_a_closed_port_in_one_line_before_any_work(tmp_path, monkeypatch, capsys):
    """``runner --address host:port`` of a closed port repeated a connection error for minutes."""
    from builders import write_notebook
    from layersim.tools import runner

    root = tmp_path / "repo"
    (root / "lib" / "layersim").mkdir(parents=True)
    (root / "pyproject.toml").write_text("")
    write_notebook(root / "notebooks" / "p" / "n.ipynb", ["1"])
    monkeypatch.setenv("LAYERSIM_ROOT", str(root))
    monkeypatch.delenv("LAYERSIM_OUT", raising=False)
    t0 = time.perf_counter()
    with pytest.raises(SystemExit) as exc:
        runner.main(["--scale", "smoke", "--jobs", "2", "--address", f"127.0.0.1:{_closed_port()}"])
    assert exc.value.code == 2 and time.perf_counter() - t0 < 5
    err = capsys.readouterr().err
    assert "Traceback" not in err and len([line for line in err.splitlines() if "error:" in line]) == 1
    assert "nothing listens" in err and not (root / "runs").exists()


# ----------------------------------------------------------------------------- devices


@pytest.fixture
def no_accelerator(monkeypatch):
    """A machine without CUDA or MPS, whatever this one has."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)


@pytest.fixture
def two_gpus(monkeypatch):
    """A machine with two CUDA devices (none is touched: only their count is read)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)


@pytest.mark.parametrize("name", ["cuda:x", "gpu", "", " ", "CUDA", "cuda:-1", "cuda:1:2", "tpu", "cpu:1", "meta", 3,
                                  None])
def test_a_device_name_torch_cannot_use_is_refused_naming_what_there_is(no_accelerator, name):
    with pytest.raises(ValueError) as info:
        device.check_device(name)
    line = str(info.value)
    assert "\n" not in line and repr(name) in line and "available here: 'auto', 'cpu'" in line
    with pytest.raises(ValueError):  # every use goes through the same check
        device.resolve_device(name)


@pytest.mark.parametrize("name", ["cuda", "cuda:0", "mps"])
def test_an_accelerator_this_machine_lacks_is_refused(no_accelerator, name):
    with pytest.raises(ValueError, match=f"device '{name}': this machine has no (CUDA|MPS)"):
        device.check_device(name)


def test_a_gpu_index_beyond_the_machines_is_refused(two_gpus):
    with pytest.raises(ValueError, match="device 'cuda:99': this machine has 2 CUDA devices.*'cuda:0', 'cuda:1'"):
        device.check_device("cuda:99")
    assert [device.check_device(d) for d in ("auto", "cpu", "cuda", "cuda:1", torch.device("cuda", 0))] == \
        ["auto", "cpu", "cuda", "cuda:1", "cuda:0"]


def test_report_refuses_cuda_without_cuda_before_any_work(repo, no_accelerator, capsys):
    _refused([*REPORT, "--device", "cuda", "--out", str(repo / "out")], capsys, "'cuda'", "no CUDA")
    assert not (repo / "out").exists()


# ----------------------------------------------------------------------------- caches


@pytest.mark.parametrize("spelling", ["figures", "notebooks", "tests/notebooks", "relative", "home", "symlink",
                                      "dotdot"])
def test_a_cache_inside_the_committed_folders_is_refused_before_anything_is_written(repo, monkeypatch, spelling):
    (repo / "link").symlink_to(repo / "notebooks")
    monkeypatch.setenv("HOME", str(repo))
    value = {"figures": str(repo / "figures" / "cache"), "notebooks": str(repo / "notebooks" / "p" / "cache"),
             "tests/notebooks": str(repo / "tests" / "notebooks" / "cache"), "relative": "repo/figures/cache",
             "home": "~/notebooks/cache", "symlink": str(repo / "link" / "cache"),
             "dotdot": str(repo / "lib" / ".." / "figures")}[spelling]
    before = _committed(repo)
    monkeypatch.setenv("LAYERSIM_CACHE", value)
    with pytest.raises(ValueError) as info:
        paths.cache_dir("checkpoints")
    line = str(info.value)
    assert "\n" not in line and f"LAYERSIM_CACHE={value}" in line and "committed" in line
    monkeypatch.setenv(writers.SWITCH, "1")  # the switch that lets a run update results never admits a cache
    with pytest.raises(ValueError, match="LAYERSIM_CACHE"):
        paths.check_locations()
    assert _committed(repo) == before and not list(repo.rglob("checkpoints"))


def test_a_data_folder_inside_the_committed_folders_is_refused_where_the_cache_goes_in_it(repo, monkeypatch):
    monkeypatch.setenv("LAYERSIM_DATA", str(repo / "figures" / "data"))
    with pytest.raises(ValueError, match="LAYERSIM_DATA=.*figures/data.*committed"):
        paths.cache_dir()
    monkeypatch.setenv("LAYERSIM_CACHE", str(repo / "cache"))  # a cache elsewhere: nothing is written under data
    assert paths.cache_dir("x") == repo / "cache" / "x"
    assert not (repo / "figures" / "data").exists()


def test_a_checkpoint_is_never_saved_into_the_committed_folders(repo):
    before = _committed(repo)
    with pytest.raises(ValueError, match="committed"):
        from layersim.train import checkpoints

        checkpoints.save(repo / "notebooks" / "p" / "vit-0123", torch.nn.Linear(2, 2), {"key": "0123"})
    assert _committed(repo) == before and temporaries(repo) == []


def test_report_refuses_a_cache_in_the_committed_folders_in_one_line(repo, monkeypatch, capsys):
    monkeypatch.setenv("LAYERSIM_CACHE", str(repo / "notebooks" / "cache"))
    before = _committed(repo)
    _refused([*REPORT, "--out", str(repo / "out")], capsys, "LAYERSIM_CACHE", "committed")
    assert _committed(repo) == before and not (repo / "out").exists()


# ----------------------------------------------------------------------------- ~ and relative paths


@pytest.mark.parametrize("variable", ["LAYERSIM_CACHE", "LAYERSIM_DATA"])
def test_the_path_variables_read_home_and_relative_paths_like_the_writers(repo, tmp_path, monkeypatch, variable):
    """``LAYERSIM_CACHE=~/c`` was a folder named ``~`` in the working directory."""
    home = tmp_path / "home"
    (home / "real").mkdir(parents=True)
    (home / "link").symlink_to(home / "real")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(home)
    read = paths.cache_dir if variable == "LAYERSIM_CACHE" else paths.data_dir
    for value in ("~/c", "c", "./link/c", "link/../c"):
        monkeypatch.setenv(variable, value)
        assert read() == writers.resolved(value) == paths.resolved(value), value
    assert not (home / "~").exists()


def test_report_hands_its_kernel_absolute_paths_the_way_the_user_meant_them(repo, tmp_path, monkeypatch, kernel,
                                                                           capsys):
    """papermill starts the kernel in notebooks/report/: a relative ``--data`` or ``LAYERSIM_CACHE`` passed on as
    given meant a file or a cache there (inside the committed notebooks)."""
    from layersim.__main__ import main

    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    (work / "texts.txt").write_text("one\ntwo\nthree\nfour\n")
    monkeypatch.setenv("LAYERSIM_CACHE", "cache")
    monkeypatch.setenv("LAYERSIM_DATA", "~/data")
    assert main(["report", "--model", MINILM, "--data", "texts.txt", "--out", "~/rep"]) == 1  # recorded, not run
    assert kernel["parameters"]["dataset"] == str(work / "texts.txt")
    assert kernel["parameters"]["out"] == str(home / "rep")
    assert kernel["environ"]["LAYERSIM_CACHE"] == str(work / "cache")
    assert kernel["environ"]["LAYERSIM_DATA"] == str(home / "data")
    assert os.environ["LAYERSIM_CACHE"] == "cache"  # the command's own environment is left as it was
    assert "recorded, not run" in capsys.readouterr().err


def test_a_model_folder_and_a_data_folder_are_named_by_their_resolved_paths(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "imgs" / "cat").mkdir(parents=True)
    assert report.describe_data("~/imgs").name == str(tmp_path / "imgs")
    monkeypatch.chdir(tmp_path / "imgs")
    assert report.describe_data("../imgs/").name == str(tmp_path / "imgs")


# ----------------------------------------------------------------------------- one line, not a traceback


def test_no_command_and_an_unknown_command_are_one_error_line(capsys):
    from layersim.__main__ import main

    assert main([]) == 2
    one_line_error(capsys.readouterr().err, "give a command", "report")
    assert main(["reprot"]) == 2
    one_line_error(capsys.readouterr().err, "unknown command 'reprot'", "report, compare, claims")
    assert main(["--help"]) == 0 and "usage:" in capsys.readouterr().out


def test_the_module_itself_exits_2_with_one_line():
    run = subprocess.run([sys.executable, "-m", "layersim", "reprot"], capture_output=True, text=True, timeout=60)
    assert run.returncode == 2
    one_line_error(run.stderr, "unknown command 'reprot'")


@pytest.mark.parametrize("argv, words", [
    (["--data", "missing.txt"], ("'missing.txt'", "no file or folder")),
    (["--data", "~/nowhere/"], ("'~/nowhere/'", "no file or folder")),
    (["--data", "d" * 5000], ("unknown data set", "name too long")),
    (["--model", "./my-model"], ("'./my-model'", "no file or folder")),
    (["--model", "m" * 5000], ("unknown model",)),
    (["--model", "all-minilm-l6-v2\x00"], ("unknown model", "\\x00")),
    (["--out", ""], ("--out", "empty")),
    (["--device", "cuda:x"], ("'cuda:x'",)),
])
def test_report_names_a_bad_value_in_one_line(repo, capsys, argv, words):
    args = dict(zip(REPORT[1::2], REPORT[2::2]), **{"--out": str(repo / "out")})
    args.update(zip(argv[::2], argv[1::2]))
    _refused(["report", *[x for kv in args.items() for x in kv]], capsys, *words)
    assert not (repo / "out").exists()


def test_report_names_a_file_it_is_given_instead_of_a_model_folder(repo, capsys):
    (repo / "weights.bin").write_bytes(b"\0")
    _refused(["report", "--model", str(repo / "weights.bin"), "--data", "austen"], capsys, "weights.bin",
             "is a file")


def test_report_names_a_folder_it_cannot_read(repo, monkeypatch, capsys):
    """Unreadable folders (simulated: the tests may run as root, who reads everything)."""
    blocked = {repo / "imgs", repo / "rep"}
    for folder in blocked:
        folder.mkdir()
        (folder / "x").mkdir()
    iterdir = Path.iterdir

    def refuse(self):
        if self in blocked:
            raise PermissionError(13, "Permission denied", str(self))
        return iterdir(self)

    monkeypatch.setattr(Path, "iterdir", refuse)
    _refused(["report", "--model", "tracing-vit:smoke", "--data", str(repo / "imgs")], capsys, str(repo / "imgs"),
             "Permission denied")
    _refused([*REPORT, "--out", str(repo / "rep")], capsys, str(repo / "rep"), "Permission denied")

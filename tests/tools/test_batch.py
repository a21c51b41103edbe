"""Tests of layersim.tools.batch: notebooks side by side on Ray, and the Ray addresses it accepts.

The batch runner (``python -m layersim.tools.runner --jobs N``): a local Ray instance of 2 CPUs runs smoke notebooks
side by side, with the same results as a serial run; a shared checkpoint is trained once; a failing notebook and a
killed worker are reported, and nothing is published for them. A Ray address is checked before Ray is imported:
a malformed one, a closed port, a host that does not answer or is unknown is one line that names it.
"""

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from layersim.tools import batch
from builders import REPO, write_notebook


#: a producer and a consumer of the standard tracing ViT (t01 trains it, t02 reads it), and one more notebook
SHARED = ["tracing/t01_cos_vs_cka", "tracing/t02_saturation_events", "alignment/a03_circle"]


def test_resources_follow_the_table_and_the_cluster():
    assert batch.resources("a03_circle", "default") == {"num_cpus": 1, "num_gpus": 0}
    cluster = {"CPU": 16.0, "GPU": 1.0, "memory": 64 * 2**30}
    paper = batch.resources("t01_cos_vs_cka", "paper", cluster)
    assert paper == {"num_cpus": 1, "num_gpus": 1.0, "memory": 8 * 2**30}
    assert batch.resources("t01_cos_vs_cka", "default", cluster)["num_gpus"] == 0  # small models: the CPU
    assert batch.resources("r04_skip_vs_approx", "paper", cluster)["memory"] == 64 * 2**30  # at most the cluster's
    assert batch.resources("t01_cos_vs_cka", "paper", {"CPU": 2.0})["num_gpus"] == 0  # no GPU: none asked for
    assert set(batch.NEEDS) <= {p.stem for p in REPO.glob("notebooks/*/*.ipynb")}


def test_a_group_that_shares_a_model_starts_with_its_trainer_and_the_others_wait_for_it():
    nbs = [Path(f"notebooks/{n}.ipynb") for n in ("alignment/a01_x", "alignment/a10_negative_transfer",
                                                  "clusters/c01_cka_structure", "clusters/c02_truncation",
                                                  "redundancy/r02_block_redundancy", "tracing/t01_cos_vs_cka",
                                                  "tracing/t09_aligned_bert")]
    a01, a10, c01, c02, r02, t01, t09 = nbs
    order, waits = batch.schedule(nbs)
    # the first of each group in the batch trains (a10 alone of its group here: it trains a09's network itself)
    assert order == [a10, c01, r02, a01, c02, t01, t09]
    assert waits == {a01: set(), a10: set(), c01: set(), c02: {c01}, t09: {c01}, r02: set(), t01: {r02}}
    assert batch.schedule([t01]) == ([t01], {t01: set()})


def test_the_shared_model_groups_name_real_notebooks_once():
    stems = {p.stem for p in REPO.glob("notebooks/*/*.ipynb")}
    members = [m for group in batch.SHARED_MODELS.values() for m in group]
    assert set(members) <= stems and len(members) == len(set(members))


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


# ----------------------------------------------------------------------------- notebooks on Ray


def _root(tmp_path: Path, names: list[str]) -> Path:
    """A repository root holding copies of ``names`` (the data read from the real one), for runs that must not
    touch the real runs/ folder."""
    root = tmp_path / "repo"
    for name in names:
        dst = root / "notebooks" / f"{name}.ipynb"
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(REPO / "notebooks" / f"{name}.ipynb", dst)
    return root


def _runner(root: Path, cache: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "LAYERSIM_ROOT": str(root), "LAYERSIM_DATA": str(REPO / "data"),
           "LAYERSIM_CACHE": str(cache), "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    env.pop("LAYERSIM_OUT", None)
    return subprocess.run([sys.executable, "-m", "layersim.tools.runner", "--scale", "smoke", *args], env=env,
                          capture_output=True, text=True, timeout=900, cwd=root)


def _without_times(value):
    if isinstance(value, dict):
        return {k: _without_times(v) for k, v in value.items() if "second" not in k and "time" not in k}
    if isinstance(value, list):
        return [_without_times(v) for v in value]
    return value


def _trained_lines(executed: Path) -> list[str]:
    text = "".join("".join(o.get("text", "")) for c in json.loads(executed.read_text())["cells"]
                   for o in c.get("outputs", []))
    return [line for line in text.splitlines() if ": ce, depth" in line and "; key " in line]  # the standard ViT


def test_notebooks_side_by_side_give_the_serial_results_and_share_a_checkpoint(tmp_path):
    serial_root, ray_root = _root(tmp_path / "s", SHARED), _root(tmp_path / "r", SHARED)
    serial = _runner(serial_root, tmp_path / "cache-serial", "--nb", ",".join(SHARED))
    assert serial.returncode == 0, serial.stdout + serial.stderr
    side = _runner(ray_root, tmp_path / "cache-ray", "--nb", ",".join(SHARED), "--jobs", "2")
    assert side.returncode == 0, side.stdout + side.stderr
    assert "3 notebooks on Ray (a local instance: 2 CPUs" in side.stdout and "at most 2 at once" in side.stdout
    assert "| notebook | node | seconds | outcome |" in side.stdout and "3 notebooks ok, 0 failed" in side.stdout
    for name in SHARED:
        paper, stem = name.split("/")
        a, b = (json.loads((r / "runs" / "smoke" / paper / stem / "metrics.json").read_text())
                for r in (serial_root, ray_root))
        assert _without_times(b) == _without_times(a), name
    # the standard ViT was trained by exactly one of t01 and t02 (the other waited for it, or found it made)
    lines = [line for name in SHARED[:2]
             for line in _trained_lines(ray_root / "runs" / "smoke" / f"{name}" / f"{name.split('/')[1]}.ipynb")]
    assert len(lines) == 2 and sum("(from the cache)" not in line for line in lines) == 1, lines
    # scheduled as SHARED_MODELS says: t01 trains it, t02 starts after t01 ended (meanwhile a03 runs beside t01)
    out = side.stdout
    assert out.index("tracing/t01_cos_vs_cka: ok") < out.index("[started] tracing/t02_saturation_events"), out
    assert out.index("[started] alignment/a03_circle") < out.index("tracing/t01_cos_vs_cka: ok"), out
    assert "(from the cache)" in "".join(_trained_lines(ray_root / "runs" / "smoke" / SHARED[1] /
                                                        "t02_saturation_events.ipynb")), lines


KILL_WORKER = "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)"


def _write_outputs(stem: str, value: int) -> str:
    """A cell that writes a run's outputs (a figure and metrics.json) where the notebook's run writes them."""
    return (f"from layersim.notebook import results\nout = results.output_dir('demo', {stem!r}, 'default')\n"
            f"(out / 'metrics.json').write_text('{{\"run\": {value}}}')\n(out / 'fig.png').write_bytes(b'{value}')")


def test_a_failing_notebook_and_a_killed_worker_are_reported_and_publish_nothing(tmp_path):
    """In a run that replaces the committed results: the notebook that fails and the one whose worker dies, both after
    writing part of their outputs, leave their committed notebook and figures as they were; the one that succeeds
    replaces both."""
    root = tmp_path / "repo"
    for name, cells in (("ok", [_write_outputs("ok", 2)]),
                        ("fails", [_write_outputs("fails", 2), "raise RuntimeError('planted failure')"]),
                        ("killed", [_write_outputs("killed", 2), KILL_WORKER])):
        write_notebook(root / "notebooks" / "demo" / f"{name}.ipynb", cells)
        old = root / "figures" / "demo" / name
        old.mkdir(parents=True)
        (old / "metrics.json").write_text('{"run": 1}')
        (old / "old.png").write_bytes(b"old")
    before = {p.name: p.read_bytes() for p in (root / "notebooks" / "demo").iterdir()}
    env = {**os.environ, "LAYERSIM_ROOT": str(root), "LAYERSIM_CACHE": str(tmp_path / "cache"), "PYTHONUNBUFFERED": "1"}
    got = subprocess.run([sys.executable, "-m", "layersim.tools.runner", "--scale", "default", "--update-committed",
                          "--seeds", "1", "--jobs", "2"], env=env, capture_output=True, text=True, timeout=600, cwd=root)
    assert got.returncode == 1, got.stdout + got.stderr
    out = got.stdout
    assert "demo/ok: ok" in out and "1 notebooks ok, 2 failed" in out, out + got.stderr[-3000:]
    assert "demo/fails: FAILED at" in out and "planted failure" in out, out
    assert "demo/killed: FAILED at" in out and "Error" in out.split("demo/killed: FAILED at")[1].splitlines()[0], out
    after = {p.name: p.read_bytes() for p in (root / "notebooks" / "demo").iterdir()}
    assert after["fails.ipynb"] == before["fails.ipynb"] and after["killed.ipynb"] == before["killed.ipynb"]
    assert after["ok.ipynb"] != before["ok.ipynb"]  # the notebook that ran is published with its outputs
    for name in ("fails", "killed"):
        folder = root / "figures" / "demo" / name
        assert sorted(p.name for p in folder.iterdir()) == ["metrics.json", "old.png"], name
        assert (folder / "metrics.json").read_text() == '{"run": 1}'
    ok = root / "figures" / "demo" / "ok"
    assert sorted(p.name for p in ok.iterdir()) == ["fig.png", "metrics.json"] and (ok / "metrics.json").read_text() == '{"run": 2}'
    assert not any((root / "runs" / ".restore").rglob("*.png"))  # nothing kept aside once the batch is over


def _wait_for(address: str, process: subprocess.Popen, seconds: float = 120) -> None:
    """Wait until something listens at ``address`` (:func:`batch.check_address`), while ``process`` runs."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            batch.check_address(address, timeout=1)
            return
        except ValueError:
            if process.poll() is not None or time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def test_the_runner_submits_to_a_running_ray_cluster(tmp_path):
    """--address: a Ray head started apart (as the Slurm recipe starts one) runs the notebooks; the runner leaves
    the cluster running, and --jobs beside it starts an instance of its own rather than joining it."""
    import secrets

    from ray.util import get_node_ip_address

    with socket.socket() as s:
        s.bind(("", 0))
        port = s.getsockname()[1]
    ip = get_node_ip_address()
    root = tmp_path / "repo"
    write_notebook(root / "notebooks" / "demo" / "one.ipynb", ["y = 2"])
    ray_cli = Path(sys.executable).with_name("ray")
    env = {**os.environ, "LAYERSIM_ROOT": str(root), "LAYERSIM_CACHE": str(tmp_path / "cache"),
           "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}  # as the Slurm recipe sets them
    head = subprocess.Popen([str(ray_cli), "start", "--head", "--block", f"--port={port}", "--num-cpus=1",
                             "--include-dashboard=false"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for(f"{ip}:{port}", head)  # the head takes a few seconds to come up; the runner refuses it until then
        got = None
        for _ in range(3):  # listening is not yet serving: a few tries more
            got = subprocess.run([sys.executable, "-m", "layersim.tools.runner", "--scale", "smoke", "--address",
                                  f"{ip}:{port}"], env=env, capture_output=True, text=True, timeout=120, cwd=root)
            if got.returncode == 0:
                break
        assert got.returncode == 0, got.stdout + got.stderr
        assert f"1 notebooks on Ray ({ip}:{port}: 1 CPUs" in got.stdout and "demo/one: ok" in got.stdout
        assert head.poll() is None  # still running: the runner stops only the instance it started
        own = subprocess.run([sys.executable, "-m", "layersim.tools.runner", "--scale", "smoke", "--jobs", "1"], env=env,
                             capture_output=True, text=True, timeout=300, cwd=root)
        assert own.returncode == 0 and "on Ray (a local instance: 1 CPUs" in own.stdout, own.stdout + own.stderr
        assert head.poll() is None  # --jobs started an instance of its own beside the running cluster
    finally:
        head.terminate()
        head.wait(timeout=60)


def test_the_slurm_recipe_starts_a_head_and_workers_and_submits_to_them():
    """The sbatch script outside Slurm, its commands printed (DRY_RUN): a head, one worker per further node, the
    runner with --address, and the cluster stopped at the end."""
    env = {**os.environ, "DRY_RUN": "1", "RAY_START_WAIT": "0", "SLURM_JOB_NODELIST": "nodeA",
           "SLURM_CPUS_PER_TASK": "16", "SLURM_GPUS_ON_NODE": "1", "SCALE": "default", "NB": "tracing"}
    script = REPO / "scripts" / "slurm_reproduce.sbatch"
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    got = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=60, cwd=REPO)
    assert got.returncode == 0, got.stderr
    lines = got.stdout.splitlines()
    assert any("ray start --head" in line and "--num-cpus=16 --num-gpus=1" in line for line in lines)
    assert any(line.endswith("-m layersim.tools.runner --scale default --nb tracing --address nodeA:6379")
               for line in lines), lines
    assert lines[-1].endswith("ray stop")


SLURM_CONF = """ClusterName=layersim
SlurmctldHost={host}
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
ReturnToService=2
SlurmUser=root
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmdSpoolDir=/var/lib/slurm/slurmd
StateSaveLocation=/var/lib/slurm/slurmctld
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
NodeName={host} CPUs={cpus} RealMemory={mem} State=UNKNOWN
PartitionName=layersim Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""


def _one_node_slurm() -> None:
    """Debian's Slurm and munge installed (apt) and started as a one-node cluster of this machine: munged, slurmctld,
    slurmd. Only as root with apt-get; a daemon already running is kept."""
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    if not shutil.which("sbatch"):
        subprocess.run(["apt-get", "update", "-qq"], env=env, check=True, timeout=600, capture_output=True)
        subprocess.run(["apt-get", "install", "-y", "-qq", "slurm-wlm", "munge"], env=env, check=True, timeout=900,
                       capture_output=True)
    host = socket.gethostname().split(".")[0]
    mem = int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**20 * 0.9)
    conf = Path("/etc/slurm/slurm.conf")
    conf.parent.mkdir(parents=True, exist_ok=True)
    conf.write_text(SLURM_CONF.format(host=host, cpus=os.cpu_count(), mem=mem))
    for folder in ("/var/lib/slurm/slurmd", "/var/lib/slurm/slurmctld", "/run/munge", "/var/log/munge"):
        Path(folder).mkdir(parents=True, exist_ok=True)
    key = Path("/etc/munge/munge.key")
    if not key.is_file():
        key.write_bytes(os.urandom(1024))
    for path in (key, Path("/run/munge"), Path("/var/log/munge"), Path("/var/lib/munge")):
        if path.exists():
            shutil.chown(path, "munge", "munge")
    key.chmod(0o400)
    for daemon, start in (("munged", ["runuser", "-u", "munge", "--", "munged"]), ("slurmctld", ["slurmctld"]),
                          ("slurmd", ["slurmd"])):
        if subprocess.run(["pgrep", "-x", daemon], capture_output=True).returncode != 0:
            subprocess.run(start, check=True, timeout=60)
    for _ in range(60):  # the node comes up idle within seconds
        got = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True)
        if got.stdout.strip() in ("idle", "mixed"):
            return
        subprocess.run(["scontrol", "update", f"nodename={host}", "state=resume"], capture_output=True)
        time.sleep(2)
    raise AssertionError(f"the one-node Slurm did not come up: sinfo says {got.stdout.strip()!r} {got.stderr}")


@pytest.mark.full
@pytest.mark.skipif(not (hasattr(os, "geteuid") and os.geteuid() == 0 and shutil.which("apt-get")),
                    reason="starts a one-node Slurm: needs root and apt-get")
def test_the_slurm_recipe_runs_on_a_real_one_node_slurm():
    """The sbatch recipe submitted to a real Slurm (Debian's slurm-wlm with munge, one node): the Ray head starts under
    srun, the runner runs t07 at the smoke scale on it, and the job ends COMPLETED with exit status 0."""
    _one_node_slurm()
    script = REPO / "scripts" / "slurm_reproduce.sbatch"
    got = subprocess.run(["sbatch", "--parsable", "--wait", "--nodes=1", f"--cpus-per-task={os.cpu_count()}",
                          "--gpus-per-node=0", "--time=20", "--export=ALL,SCALE=smoke,NB=t07,RAY_START_WAIT=15",
                          str(script)], cwd=REPO, capture_output=True, text=True, timeout=1200)
    job = got.stdout.strip().split(";")[0]
    log = REPO / "runs" / f"slurm-{job}.log"
    text = log.read_text() if log.is_file() else ""
    assert got.returncode == 0, got.stdout + got.stderr + text
    for _ in range(60):  # --wait returns while the job may still be COMPLETING (its steps ending)
        state = subprocess.run(["scontrol", "show", "job", job], capture_output=True, text=True).stdout
        if "JobState=COMPLETING" not in state:
            break
        time.sleep(1)
    assert "JobState=COMPLETED" in state and "ExitCode=0:0" in state, state  # kept by slurmctld for MinJobAge
    assert "layersim on Slurm: 1 node(s)" in text and "tracing/t07_param_table: ok" in text, text

"""A real two-node Ray cluster on this machine: ``rolling-calib sweep --executor ray --address``
spreads the units over both nodes and gives exactly the local pool's numbers.

The cluster is started the way a user starts one: ``ray start --head`` (1 CPU) and a second
``ray start --address=127.0.0.1:PORT`` (1 CPU), each with its own temp dir under
``/tmp/rc_<pid>_*`` (Ray's socket paths must stay short), its own ports and a token only this
test knows (Ray listens on every interface whatever ``--node-ip-address`` says). The
sweep runs in a subprocess, so this test process never holds a Ray driver connection. Two
configurations x 1 seed x 2 windows: the two first windows are submitted together and each
needs the one CPU of a node, so they must run on different nodes.

Teardown stops exactly this cluster's processes (found by its temp dir, plus their children),
even when the test fails. Not ``ray stop --force``: that kills every Ray process of the machine,
including a Ray runtime another test or user has running.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pandas as pd
import pytest
from signal_helpers import default_signals

pytest.importorskip("ray")
psutil = pytest.importorskip("psutil")  # a dependency of Ray

pytestmark = pytest.mark.slow

RAY = Path(sys.executable).with_name("ray")
if not RAY.is_file():
    pytest.skip(f"no `ray` command beside {sys.executable}", allow_module_level=True)
#: Object store per node (Ray's minimum is 75 MiB; units exchange only small records).
OBJECT_STORE_BYTES = 80 * 1024 * 1024


def _free_ports(n: int) -> list[int]:
    """``n`` distinct free TCP ports on 127.0.0.1."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _cluster_env() -> dict[str, str]:
    """Environment of every cluster process and of the driver: token authentication with a fresh token.

    Ray registers a node started with ``--node-ip-address=127.0.0.1`` under the machine's routable
    address and its servers listen on every interface, so the cluster is closed with its own token
    (``RAY_AUTH_MODE=token``, ``RAY_AUTH_TOKEN``) that only these processes know. Setting both
    explicitly also keeps a ``~/.ray/auth_token`` of the user out of the way.
    """
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_AUTH_TOKEN_PATH")}
    env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(32), RAY_USAGE_STATS_ENABLED="0",
               PYTHONUNBUFFERED="1")
    return env


def _ray_start(args: list[str], env: dict[str, str], log: Path) -> None:
    with log.open("a") as out:
        # its daemons are ended with SIGTERM (_stop_cluster): they start with it at its default action
        proc = subprocess.run([str(RAY), "start", *args], env=env, stdout=out, stderr=subprocess.STDOUT,
                              timeout=120, check=False, preexec_fn=default_signals)
    if proc.returncode != 0:
        raise RuntimeError(f"ray start {' '.join(args)} failed ({proc.returncode}):\n{log.read_text()[-4000:]}")


def _node_id(temp_dir: Path) -> str:
    """The Ray node ID of the node started with ``--temp-dir=temp_dir``.

    Read without a Ray driver: each node writes its ports to ``session_latest/<name>_port_<node id>``.
    """
    session = temp_dir / "session_latest"
    ids = {m.group(1) for p in session.iterdir() if (m := re.fullmatch(r"\w+_port_([0-9a-f]{32,})", p.name))}
    assert len(ids) == 1, f"expected one node ID in {session}, found {sorted(ids)}: {sorted(os.listdir(session))}"
    return ids.pop()


def _stop_cluster(tag: str) -> None:
    """Stop the processes whose command line names ``tag`` (the cluster's temp dir) and their children.

    SIGTERM, then SIGKILL after 3 s for those still running.
    """
    me = {os.getpid(), *(p.pid for p in psutil.Process().parents())}
    found: dict[int, psutil.Process] = {}
    for proc in psutil.process_iter(["cmdline"]):
        if proc.pid in me or not any(tag in arg for arg in proc.info["cmdline"] or ()):
            continue
        found[proc.pid] = proc
        try:
            found.update({child.pid: child for child in proc.children(recursive=True) if child.pid not in me})
        except psutil.NoSuchProcess:
            pass
    procs = list(found.values())
    for proc in procs:
        try:
            proc.terminate()
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(procs, timeout=3)  # Ray's agents ignore SIGTERM for a while: then kill
    for proc in alive:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(alive, timeout=5)


@pytest.fixture(scope="module")
def ray_cluster():
    """A head node and a worker node (1 CPU each) on 127.0.0.1; yields address, env and node roles."""
    root = Path(tempfile.mkdtemp(prefix=f"rc_{os.getpid()}_", dir="/tmp"))
    env = _cluster_env()
    gcs, agent_head, agent_worker = _free_ports(3)
    address = f"127.0.0.1:{gcs}"
    # No log monitor: the driver runs with --json (worker logs off) and a unit's exception reaches it anyway.
    common = ["--node-ip-address=127.0.0.1", "--num-cpus=1", "--num-gpus=0", "--disable-usage-stats",
              "--include-log-monitor=false", f"--object-store-memory={OBJECT_STORE_BYTES}"]
    try:
        _ray_start(["--head", f"--port={gcs}", "--include-dashboard=false", f"--temp-dir={root}/h",
                    f"--dashboard-agent-listen-port={agent_head}", *common], env, root / "head.log")
        _ray_start([f"--address={address}", f"--temp-dir={root}/w",
                    f"--dashboard-agent-listen-port={agent_worker}", *common], env, root / "worker.log")
        # `ray start` returns once its node is registered with the head: both nodes are up.
        nodes = {_node_id(root / "h"): "head", _node_id(root / "w"): "worker"}
        assert len(nodes) == 2, nodes
        yield {"address": address, "env": env, "nodes": nodes, "root": root}
    finally:
        _stop_cluster(f"{root}/")
        shutil.rmtree(root, ignore_errors=True)


def _unit_files(store: Path, suffix: str) -> dict[str, Path]:
    """``units/<pipeline>/seed<k>/<file>`` -> path, for the unit files ending with ``suffix``."""
    return {str(p.relative_to(store)): p for p in sorted((store / "units").rglob(f"*{suffix}"))}


def _sidecars(store: Path) -> dict[str, dict]:
    """The unit sidecars (``wNN.json``) of a store, by relative path."""
    return {name: json.loads(path.read_text()) for name, path in _unit_files(store, ".json").items()
            if re.search(r"/w\d+\.json$", name)}


def test_sweep_on_two_node_cluster_spreads_units_and_equals_local_pool(ray_cluster, tmp_path, capsys):
    from sweep_helpers import tiny_experiment

    from rolling_calib.cli import main

    config = tiny_experiment(tmp_path / "exp", seeds=1)
    common = ["sweep", str(config), "--grid", "hidden_size=4,6", "--seeds", "1", "--threads", "1",
              "--n-boot", "100", "--no-tracking", "--json", "--no-progress"]
    ray_store, local_store = tmp_path / "ray", tmp_path / "local"
    # The cluster sweep runs in a subprocess (its own Ray driver) while this process runs the local pool.
    stderr_log = tmp_path / "ray_sweep.stderr"
    with stderr_log.open("w") as err:
        driver = subprocess.Popen(
            [sys.executable, "-m", "rolling_calib.cli", *common, "--executor", "ray",
             "--address", ray_cluster["address"], "--max-retries", "0", "--store", str(ray_store)],
            env=ray_cluster["env"], cwd=tmp_path, stdout=subprocess.PIPE, stderr=err, text=True)
        try:
            assert main([*common, "--executor", "local", "--store", str(local_store)]) == 0
            local = json.loads(capsys.readouterr().out)
            ray_out, _ = driver.communicate(timeout=240)
        finally:
            if driver.poll() is None:
                driver.kill()
                driver.wait()
    assert driver.returncode == 0, stderr_log.read_text()[-4000:]
    remote = json.loads(ray_out)

    # The cluster ran every unit, and they were spread over both nodes.
    assert remote["run"]["executor"] == "ray" and remote["run"]["units_ran"] == 4
    sidecars = _sidecars(ray_store)
    assert len(sidecars) == 4
    placement = {name: ray_cluster["nodes"].get(side["node"], side["node"]) for name, side in sidecars.items()}
    print("unit -> node:", placement)  # shown with pytest -s
    assert set(placement.values()) == {"head", "worker"}, f"units not spread over both nodes: {placement}"

    # Same predictions, unit by unit (every Parquet file of a unit: test, and validation where
    # stored), and the same sweep numbers as the local pool.
    local_frames, ray_frames = _unit_files(local_store, ".parquet"), _unit_files(ray_store, ".parquet")
    assert sorted(ray_frames) == sorted(local_frames)
    assert len([name for name in ray_frames if re.search(r"/w\d+\.parquet$", name)]) == 4
    for name, path in local_frames.items():
        pd.testing.assert_frame_equal(pd.read_parquet(ray_frames[name]), pd.read_parquet(path), check_exact=True)
    assert remote["ranking"] == local["ranking"]
    assert remote["matrices"] == local["matrices"]
    local_sides = _sidecars(local_store)
    assert {n: s["ql"] for n, s in sidecars.items()} == {n: s["ql"] for n, s in local_sides.items()}
    assert all(side["node"] == os.uname().nodename for side in local_sides.values())


# --------------------------------------------------------------------------- faults (issue 30)
def _unit_workers(tag: str) -> list[psutil.Process]:
    """Ray worker processes running a unit (title ``ray::_run_unit``) under a node whose command line names ``tag``."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmd = " ".join(proc.info["cmdline"] or ())
        if not cmd.startswith("ray::_run_unit"):
            continue
        try:
            if any(tag in " ".join(p.cmdline()) for p in proc.parents()):
                found.append(proc)
        except psutil.Error:
            pass
    return found


def _kill_when(condition, action, timeout: float = 180.0) -> threading.Thread:
    """A thread that polls ``condition()`` (a list) every 50 ms and calls ``action(found)`` once it is not empty."""
    import time

    done: dict[str, object] = {}

    def watch() -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = condition()
            if found:
                done["killed"] = action(found)
                return
            time.sleep(0.05)

    thread = threading.Thread(target=watch, daemon=True)
    thread.done = done
    thread.start()
    return thread


def _sweep_on_cluster(ray_cluster, config: Path, store: Path, retries: int, log: Path) -> subprocess.Popen:
    common = ["sweep", str(config), "--grid", "hidden_size=4,6", "--seeds", "1", "--threads", "1", "--n-boot", "100",
              "--no-tracking", "--json", "--no-progress"]
    return subprocess.Popen([sys.executable, "-m", "rolling_calib.cli", *common, "--executor", "ray", "--address",
                             ray_cluster["address"], "--max-retries", str(retries), "--store", str(store)],
                            env=ray_cluster["env"], cwd=config.parent, stdout=subprocess.PIPE,
                            stderr=log.open("w"), text=True)


def test_a_worker_killed_mid_unit_is_retried_and_the_units_are_byte_identical(ray_cluster, tmp_path, capsys):
    """kill -9 of the worker process running a unit: Ray retries it, and every unit file has the local pool's bytes."""
    from sweep_helpers import tiny_experiment

    from rolling_calib.cli import main

    config = tiny_experiment(tmp_path / "exp", seeds=1)
    ray_store, local_store = tmp_path / "ray", tmp_path / "local"
    killer = _kill_when(lambda: _unit_workers(f"{ray_cluster['root']}/"),
                        lambda procs: (procs[0].kill(), procs[0].pid)[1])
    driver = _sweep_on_cluster(ray_cluster, config, ray_store, 2, tmp_path / "ray.stderr")
    try:
        assert main(["sweep", str(config), "--grid", "hidden_size=4,6", "--seeds", "1", "--threads", "1",
                     "--n-boot", "100", "--no-tracking", "--json", "--no-progress", "--executor", "local",
                     "--store", str(local_store)]) == 0
        capsys.readouterr()
        driver.communicate(timeout=300)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
    killer.join(timeout=1)
    assert "killed" in killer.done, "no unit's worker process was seen to kill"
    assert driver.returncode == 0, (tmp_path / "ray.stderr").read_text()[-4000:]
    local_files, ray_files = _unit_files(local_store, ".parquet"), _unit_files(ray_store, ".parquet")
    assert sorted(ray_files) == sorted(local_files) and len(local_files) >= 4
    for name, path in local_files.items():
        assert ray_files[name].read_bytes() == path.read_bytes(), f"{name}: other bytes after the retry"
    assert {n: s["sha256"] for n, s in _sidecars(ray_store).items()} == \
        {n: s["sha256"] for n, s in _sidecars(local_store).items()}


def test_a_lost_node_is_named(ray_cluster, tmp_path):
    """The worker node dies (kill -9 of its raylet and workers) while it runs a unit: the error names that node.

    Last in the module: the cluster has one node left afterwards.
    """
    from sweep_helpers import tiny_experiment

    config = tiny_experiment(tmp_path / "exp", seeds=1)
    worker_tag = f"{ray_cluster['root']}/w/"
    worker_id = next(node for node, role in ray_cluster["nodes"].items() if role == "worker")

    def kill_node(_procs) -> int:
        victims = [p for p in psutil.process_iter(["cmdline"]) if any(worker_tag in a for a in p.info["cmdline"] or ())]
        for proc in list(victims):
            try:
                victims += proc.children(recursive=True)
            except psutil.Error:
                pass
        for proc in victims:
            try:
                proc.kill()
            except psutil.Error:
                pass
        return len(victims)

    killer = _kill_when(lambda: _unit_workers(worker_tag), kill_node)
    log = tmp_path / "ray.stderr"
    driver = _sweep_on_cluster(ray_cluster, config, tmp_path / "ray", 0, log)
    try:
        driver.communicate(timeout=300)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
    killer.join(timeout=1)
    assert killer.done.get("killed"), "the worker node was never seen running a unit"
    err = log.read_text()
    assert driver.returncode != 0 and "Traceback" not in err, err[-4000:]
    line = next(x for x in err.splitlines() if x.startswith("rolling-calib sweep: error:"))
    # Ray registers the node under the machine's routable address (see _cluster_env), so the node id names it
    assert "was lost: Ray node " in line and f"node id {worker_id[:12]}, died while it ran" in line, line

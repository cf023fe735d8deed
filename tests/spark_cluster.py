"""A Spark standalone cluster on 127.0.0.1 from the installed pyspark's own launcher: a master
and workers in processes of their own (no download), each worker launching its executors in
JVMs of their own, with work and local directories under one temporary directory.

Every JVM is started in a process group of its own (a worker's executors are its children, in
its group), and stop() ends each group: SIGTERM, then SIGKILL after a bounded wait, so that no
JVM outlives the tests, whether they pass or fail. Should the test process itself be killed,
the kernel sends the master and workers SIGKILL (PR_SET_PDEATHSIG), and executors exit when
their worker goes."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from .server_fixture import free_port

DAEMON_MEMORY = "256m"  # the master's and workers' own heaps; executors get spark.executor.memory
WORKER_CORES = 2  # two applications at once (the driver's and a Spark Connect server's), 1 core each
WORKER_MEMORY = "1200m"
# An application's share: one 1-core executor per worker, never two on one (2 x 700m do not fit
# in a worker's 1200m), so that a killed worker's executor comes back on that worker only;
# the Spark Connect server's executors (480m) fit beside one.
APP_CONF = {
    "spark.executor.memory": "700m",
    "spark.executor.cores": "1",
    "spark.cores.max": "2",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.sql.shuffle.partitions": "4",
    "spark.ui.enabled": "false",
}


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


class SparkCluster:
    def __init__(self, workers: int = 2):
        self.dir = Path(tempfile.mkdtemp(prefix="dpsql-cluster-"))
        self.port = free_port()
        self.url = f"spark://127.0.0.1:{self.port}"
        self.scratch = self.dir / "scratch"  # [engine] scratch_dir: the same path for every executor
        self.scratch.mkdir(mode=0o700)
        self._master: subprocess.Popen | None = None
        self.workers: list[subprocess.Popen | None] = [None] * workers

    def _env(self, name: str) -> dict[str, str]:
        local = self.dir / name / "local"
        local.mkdir(parents=True, exist_ok=True)
        return {
            **os.environ,
            "SPARK_HOME": str(spark_home()),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_LOCAL_DIRS": str(local),
            "SPARK_DAEMON_MEMORY": DAEMON_MEMORY,
            "SPARK_LOG_DIR": str(self.dir / name),
            "SPARK_NO_DAEMONIZE": "1",
        }

    def _launch(self, name: str, args: list[str]) -> subprocess.Popen:
        log = open(self.dir / f"{name}.log", "wb")
        try:
            return subprocess.Popen(
                [str(spark_home() / "bin" / "spark-class"), *args],
                env=self._env(name),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )  # spark-class execs the JVM: it keeps this
        finally:
            log.close()

    def start(self) -> "SparkCluster":
        try:
            self._master = self._launch(
                "master",
                [
                    "org.apache.spark.deploy.master.Master",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(self.port),
                    "--webui-port",
                    str(free_port()),
                ],
            )
            self.wait_for(lambda: _accepts(self.port), "the master", self._master)
            for i in range(len(self.workers)):
                self.start_worker(i)
            self.wait_for(lambda: self.alive_workers() == len(self.workers), "the workers")
        except BaseException:
            self.stop()
            raise
        return self

    def start_worker(self, i: int) -> None:
        work = self.dir / f"worker{i}" / "work"
        work.mkdir(parents=True, exist_ok=True)
        self.workers[i] = self._launch(
            f"worker{i}",
            [
                "org.apache.spark.deploy.worker.Worker",
                self.url,
                "--host",
                "127.0.0.1",
                "--port",
                str(free_port()),
                "--webui-port",
                str(free_port()),
                "--cores",
                str(WORKER_CORES),
                "--memory",
                WORKER_MEMORY,
                "--work-dir",
                str(work),
            ],
        )

    def kill_worker(self, i: int) -> None:
        """SIGKILL a worker JVM (its executors notice and exit) and wait until the master sees it gone."""
        proc = self.workers[i]
        assert proc is not None
        proc.kill()
        proc.wait(timeout=30)
        self.wait_for(
            lambda: self.alive_workers() == sum(w is not None and w.poll() is None for w in self.workers),
            "the master to drop the killed worker",
            timeout=120,
        )

    def executors(self, i: int) -> list[int]:
        """The pids of worker i's executor JVMs (its children)."""
        proc = self.workers[i]
        if proc is None or proc.poll() is not None:
            return []
        return [pid for pid in _children(proc.pid) if "CoarseGrainedExecutorBackend" in _cmdline(pid)]

    def pids(self) -> list[int]:
        """Every JVM of the cluster: master, workers, executors."""
        roots = [p.pid for p in [self._master, *self.workers] if p is not None and p.poll() is None]
        return roots + [c for r in roots for c in _children(r)]

    def status(self) -> dict:
        """The master's JSON status (its web UI, on loopback): workers, active applications."""
        import json
        import urllib.request

        assert self._master is not None
        port = self._master.args[self._master.args.index("--webui-port") + 1]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/", timeout=5) as r:
            return json.load(r)

    def alive_workers(self) -> int:
        try:
            status = self.status()
        except OSError:
            return -1
        return sum(w.get("state") == "ALIVE" for w in status.get("workers", []))

    def wait_for(self, ready, what: str, proc: subprocess.Popen | None = None, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            if proc is not None and proc.poll() is not None:
                raise RuntimeError(f"{what} exited: {self.log_tail()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what} not ready after {timeout} s: {self.log_tail()}")
            time.sleep(0.5)

    def log_tail(self) -> str:
        return " | ".join(f"{p.name}: {p.read_text(errors='replace')[-600:]}" for p in sorted(self.dir.glob("*.log")))

    def stop(self) -> None:
        """Workers (with their executors) first, then the master; SIGTERM, then SIGKILL after 20 s."""
        procs = [w for w in self.workers if w is not None] + ([self._master] if self._master else [])
        for proc in procs:
            _signal_group(proc, signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                pass
            _signal_group(proc, signal.SIGKILL)  # the group's stragglers too (an executor outliving its worker)
            proc.wait(timeout=20)
        deadline = time.monotonic() + 20
        while any(_group_alive(p.pid) for p in procs) and time.monotonic() < deadline:
            time.sleep(0.1)
        shutil.rmtree(self.dir, ignore_errors=True)


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL when the process that started it dies (Linux)."""
    import ctypes

    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def _accepts(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
        return True
    except OSError:
        return False


def _children(pid: int) -> list[int]:
    """Descendants of pid, from /proc."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            parents.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def connect_server(master: str, port: int, log: Path) -> subprocess.Popen:
    """A Spark Connect server of pyspark's own distribution in the foreground, its driver on
    loopback, its executors on `master`'s cluster (or in its own JVM for local[n])."""
    home = spark_home()
    env = {
        **os.environ,
        "SPARK_HOME": str(home),
        "SPARK_NO_DAEMONIZE": "1",
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_LOG_DIR": str(log.parent),
    }
    conf = {
        **(
            {**APP_CONF, "spark.executor.memory": "480m"}
            if master.startswith("spark://")
            else {
                "spark.sql.shuffle.partitions": "2",
                "spark.ui.enabled": "false",
                "spark.driver.host": "127.0.0.1",
                "spark.driver.bindAddress": "127.0.0.1",
            }
        ),
        "spark.connect.grpc.binding.port": str(port),
        "spark.connect.grpc.binding.address": "127.0.0.1",
    }
    args = [str(home / "sbin" / "start-connect-server.sh"), "--master", master]
    for key, value in conf.items():
        args += ["--conf", f"{key}={value}"]
    with open(log, "wb") as out:
        proc = subprocess.Popen(args, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 120
    while not _accepts(port):
        if proc.poll() is not None or time.monotonic() > deadline:
            stop_group(proc)
            raise RuntimeError(f"the Spark Connect server did not start: {log.read_text(errors='replace')[-1500:]}")
        time.sleep(0.5)
    return proc


def stop_group(proc: subprocess.Popen) -> None:
    _signal_group(proc, signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        _signal_group(proc, signal.SIGKILL)
        proc.wait(timeout=20)

"""pgAdmin 4 for end-to-end tests: the pinned release from PyPI in an environment of its own
(tests/tool_envs.py), run in server mode on a free loopback port, with its configuration, data
and logs in a private folder (0700) that is removed afterwards. Nothing reaches the network: no
upgrade check, no Gravatar, no AI assistant."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

from .server_fixture import free_port
from .tool_envs import python_tool

ADMIN = ("admin@example.com", "admin-Pass-123")  # pgAdmin's own administrator, from setup-db
ANALYST = ("alice@example.com", "alice-Pass-123")  # the login the test signs in with, from add-user

CONFIG = """\
SERVER_MODE = True
DATA_DIR = {data!r}
DEFAULT_SERVER = '127.0.0.1'
DEFAULT_SERVER_PORT = {port}
UPGRADE_CHECK_ENABLED = False
SHOW_GRAVATAR_IMAGE = False
LLM_ENABLED = False
MFA_ENABLED = False
MASTER_PASSWORD_REQUIRED = False
CONSOLE_LOG_LEVEL = 30
"""


class PgAdmin:
    """`with PgAdmin() as pga:` a running pgAdmin at `pga.url`, with an administrator and the
    analyst `ANALYST` whose server list holds what `servers` registered."""

    def __init__(self) -> None:
        self.python = python_tool("pgadmin")
        site = next((self.python.parent.parent / "lib").glob("python3*/site-packages"))
        self.home = site / "pgadmin4"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.folder = Path(tempfile.mkdtemp(prefix="dpsql-pgadmin-"))  # mode 0700
        self.process: subprocess.Popen | None = None

    def __enter__(self) -> PgAdmin:
        try:
            (self.folder / "config_local.py").write_text(CONFIG.format(data=str(self.folder / "data"), port=self.port))
            self._setup("setup-db", env={"PGADMIN_SETUP_EMAIL": ADMIN[0], "PGADMIN_SETUP_PASSWORD": ADMIN[1]})
            out = self._setup("add-user", *ANALYST, "--role", "User")
            assert "wrong" not in out and "not" not in out, out
        except BaseException:
            shutil.rmtree(self.folder, ignore_errors=True)
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
        shutil.rmtree(self.folder, ignore_errors=True)

    def _env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        # config_local.py is found on the path, so the installed package is left as it was
        return {**os.environ, "PYTHONPATH": str(self.folder), "PYTHONUNBUFFERED": "1", **(extra or {})}

    def _setup(self, *args: str, env: dict[str, str] | None = None) -> str:
        done = subprocess.run(
            [str(self.python), str(self.home / "setup.py"), *args],
            env=self._env(env),
            cwd=self.folder,
            capture_output=True,
            text=True,
            timeout=300,
            stdin=subprocess.DEVNULL,
        )
        assert done.returncode == 0, (args, done.stdout[-2000:], done.stderr[-2000:])
        return done.stdout

    def register(self, servers: dict) -> None:
        """Register servers for the analyst with pgAdmin's own `setup.py load-servers`."""
        path = self.folder / "servers.json"
        path.write_text(json.dumps({"Servers": servers}))
        out = self._setup("load-servers", str(path), "--user", ANALYST[0])
        assert "Added" in out and "error" not in out.lower(), out

    def start(self, seconds: float = 180) -> None:
        self.log = open(self.folder / "server.log", "w")
        self.process = subprocess.Popen(
            [str(self.python), str(self.home / "pgAdmin4.py")],
            env=self._env(),
            cwd=self.folder,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            assert self.process.poll() is None, self.output()
            try:
                with urllib.request.urlopen(self.url + "/misc/ping", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.5)
        raise AssertionError("pgAdmin did not answer /misc/ping\n" + self.output())

    def output(self) -> str:
        """What pgAdmin printed and logged (for failures)."""
        parts = [
            p.read_text(errors="replace")[-4000:]
            for p in (self.folder / "server.log", self.folder / "data" / "pgadmin4.log")
            if p.exists()
        ]
        return "\n".join(parts)

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(30)
            self.log.close()
            self.process = None

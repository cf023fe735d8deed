"""Pieces the accuracy benchmarks share: the exact answer, the relative error of a grouped answer,
the peers' virtual environment and jobs, and writing one section of a results file.

One definition of each, so that `python -m benchmarks` and `python -m benchmarks.utility` score
an answer the same way and drive SmartNoise SQL and Qrlew the same way.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# Scoring ----------------------------------------------------------------------------------------
_MIDNIGHT = re.compile(r"^(\d{4}-\d{2}-\d{2})(?:[ T]00:00:00)?$")


def group_key(values) -> tuple:
    """A group's key, comparable across systems: a peer's answers come back through JSON, where a
    month is the text '2024-03-01 00:00:00' rather than a datetime."""
    key = []
    for v in values:
        if isinstance(v, datetime.date):
            v = v.isoformat()
        if isinstance(v, str) and (m := _MIDNIGHT.match(v)):
            v = m.group(1)
        key.append(v)
    return tuple(key)


def truth(con, sql: str) -> dict:
    """The exact answer on the raw data, by group (the last column is the value)."""
    return {group_key(r[:-1]): r[-1] for r in con.execute(sql).fetchall()}


@dataclass
class Score:
    """One query's answers against the truth: a relative error per (run, true group), the share of
    those the answer left out or NULL, and the groups answered that the truth does not have, per
    answer."""

    errors: list[float]
    missing: float
    spurious: float


def relative_error(estimate, exact) -> float:
    """|estimate - exact| / |exact|; a missing or NULL estimate is 100 % (the analyst got nothing),
    and an exact 0 is scored by the absolute error (a relative one is undefined there)."""
    if estimate is None:
        return 1.0
    return abs(estimate - exact) / (abs(exact) or 1.0)


def score(answers: list[list], exact: dict) -> Score:
    errors, missing, spurious = [], 0, 0
    for rows in answers:
        got = {group_key(r[:-1]): r[-1] for r in rows}
        errors += [relative_error(got.get(key), value) for key, value in exact.items()]
        missing += sum(got.get(key) is None for key in exact)
        spurious += len(got.keys() - exact.keys())
    return Score(errors, missing / len(errors) if errors else 0.0, spurious / len(answers) if answers else 0.0)


def relative_errors(answers: list[list], exact: dict) -> list[float]:
    return score(answers, exact).errors


def absolute(text: str) -> Path:
    """A path argument made absolute (argparse's type for --work): the policies written into
    temporary folders name their files by it."""
    return Path(text).resolve()


# Peers ------------------------------------------------------------------------------------------
def peers_python(venv: Path) -> Path:
    """The peers' interpreter, creating their virtual environment the first time."""
    marker = venv / ".installed"
    requirements = HERE / "requirements-peers.txt"
    if not marker.exists() or marker.read_text() != requirements.read_text():
        log(f"creating the peers' virtual environment in {venv} (SmartNoise SQL, Qrlew; once)")
        virtual_env(venv, ["-r", str(requirements)])
        marker.write_text(requirements.read_text())
    return venv / "bin" / "python"


def virtual_env(venv: Path, requirements: list[str]) -> Path:
    """A virtual environment at `venv` (made anew) holding `requirements` (pip install's
    arguments), and its interpreter: built by uv where its PyPI package is installed (the test
    extra has it; on a fresh machine a third of pip's time or less), by pip otherwise or where
    uv fails."""
    python = venv / "bin" / "python"
    uv = _uv()
    if uv is not None:
        steps = (
            [uv, "venv", "-q", "--clear", "--python", sys.executable, str(venv)],
            [uv, "pip", "install", "-q", "--python", str(python), *requirements],
        )
        if all(subprocess.run(step, timeout=1200).returncode == 0 for step in steps):
            return python
        shutil.rmtree(venv, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", *requirements],
        check=True,
        timeout=1200,
    )
    return python


def _uv() -> str | None:
    """uv's executable where its PyPI package is installed, else None."""
    try:
        import uv
    except ImportError:
        return None
    try:
        return uv.find_uv_bin()
    except FileNotFoundError:
        return None


def run_job(python: Path, job: dict) -> dict:
    """Runs benchmarks/peers/worker.py on `job` in the peers' interpreter: their answers by query."""
    with tempfile.TemporaryDirectory() as d:
        job_file, out_file = Path(d) / "job.json", Path(d) / "out.json"
        job_file.write_text(json.dumps(job))
        proc = subprocess.run(
            [str(python), str(HERE / "peers" / "worker.py"), str(job_file), str(out_file)],
            capture_output=True,
            text=True,
            env=dict(os.environ, RUST_BACKTRACE="0"),
        )
        if proc.returncode != 0:
            raise RuntimeError(f"{job['system']} worker failed: {proc.stderr[-2000:]}")
        return json.loads(out_file.read_text())


def peer_versions(python: Path) -> dict:
    listing = "import importlib.metadata as m, json; print(json.dumps({d.name: d.version for d in m.distributions()}))"
    out = subprocess.run([str(python), "-c", listing], capture_output=True, text=True)
    wanted = {"smartnoise-sql", "pyqrlew", "duckdb", "opendp"}
    return {name: version for name, version in json.loads(out.stdout).items() if name.lower() in wanted}


# Results files ----------------------------------------------------------------------------------
def _sections(text: str) -> list[str]:
    """The text cut before each '## ' heading (the first piece is what precedes the first one)."""
    return re.split(r"(?m)^(?=## )", text)


def replace_section(text: str, section: str) -> str:
    """`text` with the section that has `section`'s heading replaced by it, in place, or with it
    appended: several benchmarks write into one results file, each owning its own sections."""
    heading = section.splitlines()[0]
    section = section.rstrip("\n") + "\n"
    pieces = _sections(text)
    found = [i for i, p in enumerate(pieces) if p.splitlines()[:1] == [heading]]
    if found:
        pieces[found[0]] = section + ("\n" if found[0] < len(pieces) - 1 else "")
        return "".join(p for i, p in enumerate(pieces) if i not in found[1:])
    body = text.rstrip("\n")
    return (body + "\n\n" if body else "") + section


def write_keeping(path: Path, text: str, headings: tuple[str, ...]) -> None:
    """Writes `text` to `path`, carrying over the sections under `headings` that the file had
    (those another benchmark wrote there)."""
    old = path.read_text() if path.exists() else ""
    for piece in _sections(old):
        if piece.splitlines()[:1] and piece.splitlines()[0] in headings:
            text = replace_section(text, piece)
    path.write_text(text)

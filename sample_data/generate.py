"""Generate dpsql's sample hospital: python sample_data/generate.py [OUTDIR]

Deterministic (fixed seed): 20,000 patients, about 120,000 visits (most patients have a few,
some have dozens: the heavy tail that contribution bounding is for), and a public table of
wards. Written as Parquet (private tables) and CSV (public table) beside this script.

Its vocabularies (REGIONS, SEXES, WARDS, DIAGNOSES) are the one definition of the sample's keys:
the benchmarks and tests that enumerate them import them from here (`from sample_data.generate
import ...`, run from the repository's root), as sample_data/dpsql.toml declares them.
"""

from __future__ import annotations

import sys
from pathlib import Path

import duckdb
import numpy as np

SEED = 20261121
N_PATIENTS = 20_000

SEXES = ["F", "M", "X"]
REGIONS = ["North", "South", "East", "West", "Central", "Coast", "Valley", "Highlands", "Lakes", "Islands"]
WARDS = [
    # name, building, floor, specialty
    ("Cardiology", "A", 2, "heart"),
    ("Oncology", "A", 3, "cancer"),
    ("Neurology", "A", 4, "brain"),
    ("Orthopaedics", "B", 1, "bones"),
    ("Paediatrics", "B", 2, "children"),
    ("Maternity", "B", 3, "births"),
    ("Emergency", "C", 0, "acute"),
    ("Intensive Care", "C", 1, "critical"),
    ("Geriatrics", "C", 2, "elderly"),
    ("Dermatology", "D", 1, "skin"),
    ("Psychiatry", "D", 2, "mental health"),
    ("Radiology", "D", 0, "imaging"),
]
DIAGNOSES = [
    "infection",
    "injury",
    "cardiac",
    "respiratory",
    "digestive",
    "neoplasm",
    "mental",
    "musculoskeletal",
    "pregnancy",
    "skin",
    "neurological",
    "checkup",
]


def generate(out: Path) -> None:
    rng = np.random.default_rng(SEED)
    pid = np.arange(1, N_PATIENTS + 1)
    age = np.clip(rng.gamma(4.0, 11.0, N_PATIENTS), 0, 104).astype(int)
    sex = rng.choice(SEXES, N_PATIENTS, p=[0.51, 0.48, 0.01])
    region = rng.choice(REGIONS, N_PATIENTS, p=np.array([14, 12, 11, 11, 16, 8, 7, 6, 9, 6]) / 100)
    insurance = rng.choice(["public", "private", "none", "military"], N_PATIENTS, p=[0.62, 0.28, 0.08, 0.02])
    income = np.round(np.clip(rng.lognormal(10.6, 0.6, N_PATIENTS), 0, 2_000_000), -2)
    smoker = rng.random(N_PATIENTS) < 0.18

    # Visits per patient: mostly a few, older patients more, and a heavy tail of frequent visitors.
    base = rng.poisson(2.0 + age / 20.0)
    frequent = rng.random(N_PATIENTS) < 0.02
    n_visits = base + frequent * rng.integers(20, 120, N_PATIENTS)
    v_pid = np.repeat(pid, n_visits)
    n = len(v_pid)
    v_age = np.repeat(age, n_visits)
    ward_idx = rng.integers(0, len(WARDS), n)
    ward_idx = np.where(v_age < 16, 4, ward_idx)  # children go to Paediatrics
    ward = np.array([w[0] for w in WARDS])[ward_idx]
    day = rng.integers(0, 730, n)
    diagnosis = rng.choice(DIAGNOSES, n)
    cost = np.round(np.clip(rng.lognormal(6.3, 1.1, n) * (1 + (ward_idx == 7) * 4), 20, 50_000), 2)
    stay = np.clip(rng.poisson(1.5, n) + (ward_idx == 7) * rng.integers(2, 20, n), 0, 90)

    out.mkdir(parents=True, exist_ok=True)
    con = duckdb.connect()
    con.register(
        "patients_np",
        {
            "patient_id": pid,
            "age": age,
            "sex": sex.astype(object),
            "region": region.astype(object),
            "insurance": insurance.astype(object),
            "income": income,
            "smoker": smoker,
        },
    )
    con.register(
        "visits_np",
        {
            "visit_id": np.arange(1, n + 1),
            "patient_id": v_pid,
            "day": day,
            "ward": ward.astype(object),
            "diagnosis": diagnosis.astype(object),
            "cost": cost,
            "length_of_stay": stay,
        },
    )
    con.execute(
        f"COPY (SELECT * FROM patients_np ORDER BY patient_id) TO '{out / 'patients.parquet'}' "
        "(FORMAT parquet, COMPRESSION zstd)"
    )
    con.execute(
        "COPY (SELECT visit_id, patient_id, DATE '2023-01-01' + CAST(day AS INTEGER) AS visit_date, ward, diagnosis, "
        f"cost, length_of_stay FROM visits_np ORDER BY visit_id) TO '{out / 'visits.parquet'}' "
        "(FORMAT parquet, COMPRESSION zstd)"
    )
    with open(out / "wards.csv", "w", encoding="utf-8") as f:
        f.write("name,building,floor,specialty\n")
        for w in WARDS:
            f.write(",".join(map(str, w)) + "\n")
    print(f"wrote {N_PATIENTS} patients and {n} visits to {out}")


if __name__ == "__main__":
    generate(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent)

"""What carries the guarantee, and only that: the frozen plan of a DP query, its measures and
bounding strategies (the SQL that bounds a unit's contribution beside the sensitivity it
states), the aggregate families, the calibration of noise to that sensitivity, the samplers, the
release guard and the release itself. An auditor of one query reads this folder, the analysis
that builds the plan (sql/analyze.py) and the bounded query's assembly (sql/rewrite.py).

Dependencies point one way: this folder uses sql/'s node builders and total expressions, the
accounting math, the engines' ResultSet and the ledger's Charge receipt; the analysis, the
rewrite, the session and the front ends use it, never the other way."""

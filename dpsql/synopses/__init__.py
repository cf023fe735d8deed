"""Synopses: a table's cube published once, under one charge, and every dashboard query over it
answered free (issue 34, DESIGN §12).

spec.py      [synopses.NAME] in the policy, validated against it
strategy.py  what is measured (marginals) and how the epsilon is split among them
reconstruct.py  least squares over the noisy marginals, then non-negativity; variances
publish.py   the one charge, the bounded cube, the noise (guarantee/mechanisms.py), the guard
store.py     the published synopses, in the ledger's database, per data version
route.py     whether a query is a function of a published synopsis, and its answer
"""

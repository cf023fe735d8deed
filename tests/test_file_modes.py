"""Private files stay private: every file dpsql creates that holds the ledger (logins' verifiers,
queries, answers), its key, a backup or a release is its owner's only (0600, directories 0700),
whatever the umask; `dpsql ledger verify` and `dpsql serve` warn about an older ledger's open modes.
"""

from __future__ import annotations

import pytest

from dpsql import owner_only


def test_owner_only_output_leaves_nothing_behind_on_failure(tmp_path):
    target = tmp_path / "r.csv"
    with pytest.raises(RuntimeError):
        with owner_only.output(target) as inside:
            inside.write_text("half")
            raise RuntimeError("the writer failed")
    assert list(tmp_path.iterdir()) == []

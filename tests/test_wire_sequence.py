"""The message loop's sequencing alone (server/wire/sequence.py), no socket: what follows each
message type, an error skipping to the next Sync, ReadyForQuery's transaction status."""

from __future__ import annotations

from dpsql.server.wire.codes import Frontend as F
from dpsql.server.wire.sequence import Sequence, Step

PROCESS = Step(process=True)
NOTHING = Step()


def _run(seq: Sequence, kinds: list[bytes], fail: frozenset[int] = frozenset()) -> list[Step]:
    """Each message's steps as the loop would take them: receive, then done or failed (the
    message at an index in fail answered with an error)."""
    out = []
    for i, kind in enumerate(kinds):
        step = seq.receive(kind)
        out.append(step)
        if step.process:
            out.append(seq.failed(kind) if i in fail else seq.done(kind))
    return out


def test_an_extended_batch_waits_for_sync_then_ready_idle():
    seq = Sequence()
    steps = _run(seq, [F.PARSE, F.BIND, F.DESCRIBE, F.EXECUTE, F.CLOSE, F.SYNC])
    assert steps[:-1] == [PROCESS, NOTHING] * 5  # processed, nothing sent or flushed yet
    assert steps[-1] == Step(ready="I", flush=True)


def test_an_error_mid_batch_skips_to_sync_and_the_next_batch_runs():
    seq = Sequence()
    steps = _run(seq, [F.PARSE, F.BIND, F.EXECUTE, F.DESCRIBE, F.CLOSE, F.SYNC, F.PARSE], fail=frozenset({1}))
    assert steps[:4] == [PROCESS, NOTHING, PROCESS, NOTHING]  # Parse done, Bind failed: nothing flushed
    assert seq.skipping is False  # reset by the Sync below
    assert steps[4:7] == [NOTHING, NOTHING, NOTHING]  # Execute, Describe, Close skipped
    assert steps[7] == Step(ready="I", flush=True)
    assert steps[8:] == [PROCESS, NOTHING]


def test_skipping_ignores_a_simple_query_but_not_flush_or_terminate():
    seq = Sequence()
    _run(seq, [F.EXECUTE], fail=frozenset({0}))
    assert seq.receive(F.QUERY) == NOTHING
    assert seq.receive(F.FLUSH) == Step(flush=True)
    assert seq.skipping
    assert seq.receive(F.TERMINATE) == Step(end=True)


def test_sync_after_an_error_in_a_transaction_reports_failed_then_idle():
    seq = Sequence()
    seq.status = "T"  # BEGIN answered (the connection's routing sets it)
    _run(seq, [F.PARSE, F.BIND, F.EXECUTE], fail=frozenset({2}))
    assert seq.status == "E"
    assert seq.receive(F.SYNC) == Step(ready="E", flush=True)
    seq.status = "I"  # ROLLBACK answered
    assert seq.receive(F.SYNC) == Step(ready="I", flush=True)


def test_an_error_outside_a_transaction_leaves_it_idle():
    seq = Sequence()
    _run(seq, [F.EXECUTE], fail=frozenset({0}))
    assert seq.receive(F.SYNC) == Step(ready="I", flush=True)


def test_flush_flushes_without_ready_for_query():
    seq = Sequence()
    assert _run(seq, [F.PARSE, F.FLUSH]) == [PROCESS, NOTHING, Step(flush=True)]


def test_a_simple_query_answers_ready_and_flushes_error_or_not():
    seq = Sequence()
    assert seq.receive(F.QUERY) == PROCESS
    assert seq.done(F.QUERY) == Step(ready="I", flush=True)
    seq.status = "T"
    assert seq.receive(F.QUERY) == PROCESS
    assert seq.failed(F.QUERY) == Step(ready="E", flush=True)
    assert not seq.skipping  # a simple query's error skips nothing


def test_a_simple_query_inside_an_extended_batch():
    seq = Sequence()
    steps = _run(seq, [F.PARSE, F.BIND, F.QUERY, F.EXECUTE, F.SYNC])
    assert steps[4:6] == [PROCESS, Step(ready="I", flush=True)]  # answered and flushed at once
    assert steps[6:] == [PROCESS, NOTHING, Step(ready="I", flush=True)]


def test_copy_messages_outside_copy_are_ignored():
    seq = Sequence()
    for kind in (F.COPY_DATA, F.COPY_DONE, F.COPY_FAIL):
        assert seq.receive(kind) == NOTHING
    assert not seq.skipping


def test_an_unknown_type_goes_to_the_handler_which_refuses_it():
    assert Sequence().receive(b"z") == PROCESS


def test_terminate_ends_the_session():
    seq = Sequence()
    assert seq.receive(F.TERMINATE) == Step(end=True)

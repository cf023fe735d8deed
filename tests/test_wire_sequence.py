"""The message loop's sequencing alone (server/wire/sequence.py), no socket: what follows each
message type, an error skipping to the next Sync, ReadyForQuery's transaction status and how
transaction control statements and errors move it."""

from __future__ import annotations

import pytest

from dpsql.errors import Error
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
    seq.begin()  # BEGIN answered
    _run(seq, [F.PARSE, F.BIND, F.EXECUTE], fail=frozenset({2}))
    assert seq.status == "E"
    assert seq.receive(F.SYNC) == Step(ready="E", flush=True)
    seq.rollback()  # ROLLBACK answered
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
    seq.begin()
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


# Transaction status by message sequence. A message is its type and the statements it carries, as
# the connection's routing names them: "select" (any statement that succeeds), "fail" (one answered
# with an error), and the transaction control statements. Each case lists the statuses of the
# ReadyForQuery messages sent, in order, and the SQLSTATEs of the errors the sequencing raised.
def Q(*statements: str) -> tuple[bytes, tuple[str, ...]]:  # noqa: N802 (a simple query)
    return F.QUERY, statements


def X(statement: str) -> tuple[bytes, tuple[str, ...]]:  # noqa: N802 (an Execute)
    return F.EXECUTE, (statement,)


P, B, S = (F.PARSE, ()), (F.BIND, ()), (F.SYNC, ())
ENDS_BLOCK = {"commit", "rollback", "rollback to"}
CONTROL = {
    "begin": Sequence.begin,
    "commit": Sequence.commit,
    "rollback": Sequence.rollback,
    "rollback to": Sequence.rollback_to,
    "savepoint": lambda seq: seq.savepoint("SAVEPOINT"),
    "select": lambda seq: None,
}


def _statuses(messages: list[tuple[bytes, tuple[str, ...]]]) -> tuple[list[str], list[str]]:
    """The loop and the connection's routing, without them: each message received; each of its
    statements admitted, then failing or moving the status; the message done or failed."""
    seq, ready, raised = Sequence(), [], []
    for kind, statements in messages:
        step = seq.receive(kind)
        if step.process:
            try:
                for statement in statements:
                    seq.admit(statement in ENDS_BLOCK)
                    if statement == "fail":
                        raise Error("division by zero", sqlstate="22012")
                    CONTROL[statement](seq)
                step = seq.done(kind)
            except Error as e:
                raised.append(e.sqlstate)
                step = seq.failed(kind)
        if step.ready is not None:
            ready.append(step.ready)
    return ready, raised


CASES = {
    "a block committed": ([Q("begin"), Q("select"), Q("commit")], ["T", "T", "I"], []),
    "a block rolled back": ([Q("begin"), Q("select"), Q("rollback")], ["T", "T", "I"], []),
    "BEGIN inside a block": ([Q("begin"), Q("begin"), Q("commit")], ["T", "T", "I"], []),
    "COMMIT and ROLLBACK while idle": ([Q("commit"), Q("rollback")], ["I", "I"], []),
    "an error outside a block": ([Q("fail"), Q("select")], ["I", "I"], ["22012"]),
    "an error fails the block, which refuses the rest until ROLLBACK": (
        [Q("begin"), Q("fail"), Q("select"), Q("rollback"), Q("select")],
        ["T", "E", "E", "I", "I"],
        ["22012", "25P02"],
    ),
    "COMMIT ends a failed block": ([Q("begin"), Q("fail"), Q("commit")], ["T", "E", "I"], ["22012"]),
    "statements of one simple query move it in turn": (
        [Q("begin", "select", "commit"), Q("select", "begin"), Q("fail", "rollback")],
        ["I", "T", "E"],
        ["22012"],
    ),
    "an error in a simple query stops its rest": ([Q("begin", "fail", "rollback")], ["E"], ["22012"]),
    "a savepoint recovers a failed block": (
        [Q("begin"), Q("savepoint"), Q("fail"), Q("rollback to"), Q("select"), Q("commit")],
        ["T", "T", "E", "T", "T", "I"],
        ["22012"],
    ),
    "savepoints outside a block are refused": ([Q("savepoint"), Q("rollback to")], ["I", "I"], ["25P01", "25P01"]),
    "SAVEPOINT in a failed block is refused": ([Q("begin", "fail"), Q("savepoint")], ["E", "E"], ["22012", "25P02"]),
    "extended: BEGIN is reported at Sync": ([P, B, X("begin"), S], ["T"], []),
    "extended: a batch's block, one ReadyForQuery": ([X("begin"), X("select"), X("commit"), S], ["I"], []),
    "extended: an error in a block skips to Sync, which reports it failed": (
        [X("begin"), S, P, B, X("fail"), P, B, X("select"), S],
        ["T", "E"],
        ["22012"],
    ),
    "extended: a failed block refuses each batch until ROLLBACK": (
        [X("begin"), X("fail"), S, P, B, X("select"), S, P, B, X("rollback"), S],
        ["E", "E", "I"],
        ["22012", "25P02"],
    ),
    "extended: an error outside a block skips to Sync, idle": (
        [P, B, X("fail"), X("begin"), S, X("select"), S],
        ["I", "I"],
        ["22012"],
    ),
    "extended: ROLLBACK TO SAVEPOINT after a failed batch": (
        [X("begin"), X("savepoint"), S, X("fail"), S, X("rollback to"), S, X("commit"), S],
        ["T", "E", "T", "I"],
        ["22012"],
    ),
    "a simple query inside an extended block": ([X("begin"), Q("fail"), X("rollback"), S], ["E", "I"], ["22012"]),
}


@pytest.mark.parametrize("messages, ready, raised", CASES.values(), ids=CASES.keys())
def test_transaction_status_by_message_sequence(messages, ready, raised):
    assert _statuses(messages) == (ready, raised)


def test_commit_of_a_failed_block_says_it_rolled_back():
    seq = Sequence()
    assert seq.begin() and not seq.begin()  # opened once
    assert seq.commit()
    seq.begin()
    seq.failed(F.QUERY)
    assert not seq.commit() and seq.status == "I"  # its tag is ROLLBACK, as PostgreSQL's


def test_the_refusals_name_what_to_do():
    seq = Sequence()
    with pytest.raises(Error) as outside:
        seq.rollback_to()
    assert outside.value.sqlstate == "25P01" and "BEGIN" in outside.value.hint and seq.status == "I"
    seq.begin()
    seq.failed(F.EXECUTE)
    with pytest.raises(Error) as failed:
        seq.admit(False)
    assert failed.value.sqlstate == "25P02" and "ROLLBACK" in failed.value.hint
    seq.admit(True)  # what ends the block runs

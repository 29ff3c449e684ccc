"""The dependency rule lives in one module, and every reader of it agrees with it."""

import ast
from pathlib import Path

import numpy as np
from hypothesis import given, settings

from pipesim.analysis import critical
from pipesim.schedules import get_schedule
from pipesim.schedules.dependencies import Hop, Message, dependencies
from pipesim.schedules.ir import Action, B, F, I, W
from pipesim.sim.engine import simulate
from pipesim.sim.fast.index import build_index
from pipesim.sim.trace import KIND_CODES, Cause, Lane, RowKind
from tests.sim.test_properties import random_schedules

ROOT = Path(__file__).resolve().parents[2] / "pipesim"
RULE_HOMES = {"schedules/ir.py", "schedules/dependencies.py"}


def test_two_chains_never_talk_and_each_hop_names_its_devices():
    deps = dependencies(get_schedule("dualpipe", 4, 8))  # stages 0..3 and 4..7, two copies
    assert deps.upstream == (-1, 0, 1, 2, -1, 4, 5, 6)
    assert deps.downstream == (1, 2, 3, -1, 5, 6, 7, -1)
    assert deps.incoming(F, 0) is None and deps.outgoing(F, 3) is None
    assert deps.outgoing(F, 1) == Hop(Message.ACTIVATION, 1, 2, 1, 2)
    assert deps.outgoing(B, 5) == Hop(Message.GRADIENT, 5, 4, 2, 3)
    assert deps.incoming(I, 2) == Hop(Message.GRADIENT, 3, 2, 3, 2)
    assert deps.outgoing(W, 2) is None and deps.incoming(W, 2) is None
    assert deps.message_producers(Action(2, B, 0)) == ((3, B, 0), (3, I, 0))
    assert deps.waits_for(Action(2, W, 5)) == ((2, I, 5),)
    assert deps.waits_for(Action(2, F, 5)) == ((1, F, 5),)
    assert deps.outgoing(F, 1).boundary == deps.outgoing(B, 2).boundary == 1


def test_no_other_module_restates_the_rule():
    """Only the IR (chains) and the dependency module say which stage feeds which."""
    for path in sorted(ROOT.rglob("*.py")):
        name = path.relative_to(ROOT).as_posix()
        if name in RULE_HOMES:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr in ("prev_stage", "next_stage"):
                raise AssertionError(f"{name}:{node.lineno} asks {node.attr}, not the rule")


def atom_of(trace, row):
    return trace.actions[row]


@settings(max_examples=60, deadline=None)
@given(random_schedules())
def test_engine_fast_index_and_critical_path_read_the_rule(case):
    schedule, costs, topology = case
    deps = dependencies(schedule)
    trace = simulate(schedule, costs, topology)
    # The engine: each transfer is a hop the rule names, from its sender to its receiver.
    for row in np.flatnonzero(trace.kind == RowKind.SEND_F):
        atom = atom_of(trace, row)
        hop = deps.outgoing(atom.kind, atom.stage)
        assert hop.message == Message.ACTIVATION
        assert (hop.src, hop.dst) == (trace.device[row], trace.peer[row])
    for row in np.flatnonzero(trace.kind == RowKind.SEND_B):
        hop = deps.outgoing(atom_of(trace, row).kind, atom_of(trace, row).stage)
        assert hop.message == Message.GRADIENT and hop.dst == trace.peer[row]
    index = critical._Index(trace, schedule, topology)
    compute = np.flatnonzero(trace.lane == Lane.COMPUTE)
    for row in compute.tolist():
        wanted = {k for atom in atom_of(trace, row).atoms for k in deps.message_producers(atom)}
        # The critical path's inputs: one per atom that takes a message, from its producer.
        takers = [a for a in atom_of(trace, row).atoms if deps.message_producers(a)]
        inputs = index.inputs(row)
        assert len(inputs) == len(takers)
        for r in inputs:
            producer = atom_of(trace, index.producer(r))
            assert {(a.stage, a.kind, a.microbatch) for a in producer.atoms} & wanted
        # The engine's recorded input is one of them.
        if trace.cause[row] == Cause.INPUT:
            producer = index.producer(int(trace.cause_row[row]))
            assert {
                (a.stage, a.kind, a.microbatch) for a in atom_of(trace, producer).atoms
            } & wanted
    # The fast evaluator's index: each message joins a producer to a consumer the rule names.
    fast = build_index(schedule)
    assert fast.fault is None
    consumer = {int(m): n for n, m in enumerate(fast.graph.input_of.tolist()) if m >= 0}
    expected = sum(
        deps.outgoing(atom.kind, atom.stage) is not None
        for actions in schedule.device_actions
        for action in actions
        for atom in action.atoms
    )
    assert len(fast.message_node) == expected
    for m in range(len(fast.message_node)):
        sender = (
            int(fast.message_stage[m]),
            KIND_CODES[fast.node_kind[fast.message_node[m]]],
            int(fast.message_microbatch[m]),
        )
        receiver = fast.pool()[consumer[m]]
        assert sender in deps.message_producers(receiver)
        hop = deps.outgoing(sender[1], sender[0])
        assert (hop.src, hop.dst) == (fast.message_src[m], fast.message_dst[m])

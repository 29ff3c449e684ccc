"""The device workers of a plain schedule: wait for the inputs, compute, ship the outputs.

Picture one worker per device with a to-do list. A worker takes its next action, waits
until the inputs that action needs have arrived (the rule: ``pipesim.schedules.
dependencies``, laid out per stage in the run's rules), works for the action's duration,
then ships its outputs down the links. It never skips ahead: an action whose input is
late blocks everything behind it on that device (head-of-line blocking, as real
pipeline runtimes do).

``common_steps`` is the common step written out for speed (one SimPy event per action,
an input whose arrival is known costs a dict lookup); from the first action it cannot
take (an overlapped pair, link noise, a channel shared by several senders, a blocking
send) the rest of the list runs as ``general_steps``. Both write the same rows.
"""

from __future__ import annotations

from pipesim.schedules.ir import Action
from pipesim.sim.trace import ROWS_PER_BLOCK, Cause

_START, _DEVICE, _INPUT = int(Cause.START), int(Cause.DEVICE), int(Cause.INPUT)
_CHANNEL, _PRODUCER = int(Cause.CHANNEL), int(Cause.PRODUCER)


def common_steps(run, device: int, actions: tuple[Action, ...]):
    """One worker of ``run`` (a ``Run``); ``free``: when the device falls free."""
    env, arrival_at, waiting, rules = run.env, run.arrival_at, run.waiting, run.plain_rules
    order, progress, cells = run.order, run.order.progress, run.order.cells[device]
    rows, trace_actions, next_row = run.out.rows, run.out.actions, run.next_row
    channel_free, holder, overhead = run.channels.free, run.channels.holder, run.overhead
    general, scale = run.general, run.duration_scale
    free, clock, cause, cause_row = 0.0, 0.0, _START, -1  # clock: SimPy's now
    for step, action in enumerate(actions):
        stage, kind, microbatch, sub = action
        if sub is not None or general:  # from here on, the general way
            return (yield from general_steps(run, device, actions, step, (free, cause, cause_row)))
        needs, outputs, durations, before, after, code, send_code = rules[kind]
        cell = cells[stage] + microbatch  # a foreign stage: TypeError (see Run.execute)
        if progress[cell] != before:
            order.out_of_order(device, step, action)
        progress[cell] = after
        base = needs[stage]
        if base is not None:
            key = base + 2 * microbatch
            got = arrival_at.pop(key, None)  # each input is consumed exactly once
            if got is None:
                yield run.wait(device, step, key)
                clock, got = env.now, arrival_at.pop(key)
            if got[0] > free:
                free, cause, cause_row = got[0], _INPUT, got[1]
        duration = durations[stage]
        if scale is not None:  # a noisy run (Monte Carlo)
            duration *= scale(device, action)
        end = free + duration + overhead
        delay = end - clock if end > clock else 0.0
        yield env.timeout(delay)
        clock += delay  # SimPy's own sum, so clock == env.now
        row = next_row()
        rows.append((device, stage, microbatch, code, free, end, -1, cause, cause_row))
        trace_actions.append(action)
        if len(rows) >= ROWS_PER_BLOCK:
            run.out.pack()  # tuples into a NumPy block: bounded memory per row
        free, cause, cause_row = end, _DEVICE, row
        target = outputs[stage]
        if target is None:
            continue
        key, dst, occupancy, latency, channel, _ = target
        key += 2 * microbatch
        if channel is None:  # same device or an ideal link: there at once
            arrival_at[key] = (end, row)
        else:  # first come, first served on a channel with one sender
            ready = channel_free[channel]
            begin, why, why_row = (
                (ready, _CHANNEL, holder[channel]) if ready > end else (end, _PRODUCER, row)
            )
            channel_free[channel] = begin + occupancy
            arrival, sent = begin + occupancy + latency, next_row()
            rows.append((device, stage, microbatch, send_code, begin, arrival, dst, why, why_row))
            trace_actions.append(action)
            arrival_at[key], holder[channel] = (arrival, sent), sent
        if waiting and key in waiting:
            waiting.pop(key).succeed()  # the receiver wakes now, sleeps on until arrival
    yield from run.finish(device, free, cause, cause_row)


def general_steps(run, device: int, actions: tuple[Action, ...], first: int, since: tuple):
    """The rest of a device's list from step ``first``, the general way: overlapped
    pairs, noisy links, channels shared by several senders, and sends that hold the
    sender until they arrive (``comm_overlap`` off). ``since``: (free, cause, row)."""
    env, arrival_at, rules, order = run.env, run.arrival_at, run.rules, run.order
    progress, cells, width = order.progress, order.cells[device], run.width
    overlap = run.topology.comm_overlap
    free, cause, cause_row = since
    for step in range(first, len(actions)):
        action = actions[step]
        for atom in action.atoms:
            stage, kind, microbatch, _ = atom
            rule = rules[kind]
            cell = cells[stage] + microbatch
            if progress[cell] != rule.before or not 0 <= microbatch < width:
                order.out_of_order(device, step, atom)
            progress[cell] = rule.after
            base = rule.inputs[stage]
            if base is None:
                continue
            key = base + 2 * microbatch
            if key not in arrival_at:
                yield run.wait(device, step, key)
            ready, row = arrival_at.pop(key)
            if ready > free:
                free, cause, cause_row = ready, _INPUT, row
        end = free + run.duration(device, action) + run.overhead
        yield env.timeout(max(end - env.now, 0.0))
        row = run.record(device, action, free, end, (cause, cause_row))
        free, cause, cause_row = end, _DEVICE, row
        sent = run.ship(device, action, end, row)
        if sent and not overlap:
            free, cause, cause_row = yield from run.hold(end, sent, row)
    yield from run.finish(device, free, cause, cause_row)


__all__ = ["common_steps", "general_steps"]

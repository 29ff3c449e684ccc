"""An independent list-scheduling evaluator: start and end times without SimPy.

Each device runs its list in order; of all devices whose next action has every input
known, the one that can start earliest runs next (the idea of zero-bubble's ``add_time``
pass, taken in time order). Links follow LogGP: a message holds its channel for
``bytes / bandwidth + gap`` and arrives ``latency`` after leaving it. A channel with one
sender serves in that sender's program order; a channel shared by several senders serves
requests in order of (request time, sender device, program order), once every action
that starts by the request time has run. Returns ``{(device, step): (start, end)}``, or
raises RuntimeError on a deadlock.
"""

import itertools

from pipesim.schedules.ir import OVERLAP_F_B, B, F, I, W


def evaluate(schedule, costs, topology=None):
    devices, actions = schedule.devices, schedule.device_actions
    times, pointer, free, held = {}, [0] * devices, [0.0] * devices, [0] * devices
    arrival, done, channel_free, pending, order = {}, {}, {}, [], itertools.count()
    blocking = topology is not None and not topology.comm_overlap
    senders = {}
    for (src, _), name in topology.channels.items() if topology else ():
        senders.setdefault(name, set()).add(src)

    def needs(atom):
        if atom.kind == F:
            prev = schedule.prev_stage(atom.stage)
            return [] if prev is None else [("act", atom.stage, atom.microbatch)]
        if atom.kind in (B, I):
            nxt = schedule.next_stage(atom.stage)
            own = [("done", atom.stage, F, atom.microbatch)]
            return own + ([] if nxt is None else [("grad", atom.stage, atom.microbatch)])
        return [("done", atom.stage, I, atom.microbatch)]

    def known(key):
        return done.get(key[1:]) if key[0] == "done" else arrival.get(key)

    def duration(action):
        ms = schedule.model_stage
        if action.kind == OVERLAP_F_B:
            members = [(a.kind, ms(a.stage)) for a in action.sub_actions]
            length = two_stream_length(costs, members)
            if length is not None:
                return length
            if len(members) != 2:
                return sum(costs.duration_ms(kind, stage) for kind, stage in members)
            (_, f), (kind, b) = members
            return costs.overlapped_ms(f, kind, b)
        return costs.duration_ms(action.kind, ms(action.stage))

    def transmit(channel, ready, link, nbytes):
        begin = max(ready, channel_free.get(channel, 0.0))
        leave = channel_free[channel] = begin + link.occupancy_ms(nbytes)
        return leave + link.latency_ms

    def ship(d, atom, end):
        if atom.kind == F and schedule.next_stage(atom.stage) is not None:
            other, key = atom.stage + 1, ("act", atom.stage + 1, atom.microbatch)
        elif atom.kind in (B, I) and schedule.prev_stage(atom.stage) is not None:
            other, key = atom.stage - 1, ("grad", atom.stage - 1, atom.microbatch)
        else:
            return
        dst = schedule.placement[other]
        if dst == d or topology is None or topology.link(d, dst).is_ideal:
            arrival[key] = end
            return
        nbytes = costs.activation_bytes[schedule.model_stage(min(atom.stage, other))]
        request = (key, topology.link(d, dst), nbytes)
        channel = topology.channel(d, dst)
        if len(senders.get(channel, ())) > 1:
            pending.append((end, d, next(order), channel, request))
            held[d] += blocking
            return
        arrival[key] = transmit(channel, end, *request[1:])
        if blocking:
            free[d] = max(free[d], arrival[key])

    def run(d, start):
        action = actions[d][pointer[d]]
        end = start + duration(action) + costs.overhead_ms
        times[(d, pointer[d])], free[d] = (start, end), end
        for atom in action.atoms:
            done[(atom.stage, atom.kind, atom.microbatch)] = end
            ship(d, atom, end)
        pointer[d] += 1

    def grant(now):
        batch = sorted(p for p in pending if p[0] == now)
        pending[:] = [p for p in pending if p[0] != now]
        for _, d, _, channel, (key, link, nbytes) in batch:
            arrival[key] = transmit(channel, now, link, nbytes)
            if blocking:
                free[d], held[d] = max(free[d], arrival[key]), held[d] - 1

    while True:
        ready = []
        for d in range(devices):
            if pointer[d] < len(actions[d]) and not held[d]:
                atoms = actions[d][pointer[d]].atoms
                inside = {("done", a.stage, a.kind, a.microbatch) for a in atoms}  # a group's own
                inputs = [known(k) for atom in atoms for k in needs(atom) if k not in inside]
                if None not in inputs:
                    ready.append((max([free[d], *inputs]), d))
        first = min(pending, default=None)
        if ready and (first is None or min(ready)[0] <= first[0]):
            run(min(ready)[1], min(ready)[0])
        elif first is not None:
            grant(first[0])
        else:
            break
    if any(p < len(a) for p, a in zip(pointer, actions, strict=True)):
        raise RuntimeError("deadlock")
    return times


def two_stream_length(costs, members):
    """A MoE group's length, found apart from ``pipesim.sim.sublayers``: the parts as a
    graph (each part after its chain's previous part and its stream's previous part, in
    DualPipe's issue order: backward, forward, delayed W on compute; backward, forward on
    comm), relaxed to the longest path. None where the costs give no parts for it."""
    kinds = [kind for kind, _ in members]
    if costs.moe_parts is None or costs.overlapped_fb_ms is not None:
        return None
    if not any(costs.moe_parts[stage] for _, stage in members):
        return None
    delayed = kinds == [F, I, W] and members[1][1] == members[2][1]
    if kinds[:1] != [F] or not (len(kinds) == 2 and kinds[1] in (B, I) or delayed):
        return None
    chains = [costs.pass_parts(kind, stage) for kind, stage in members[:2]]
    weight = []
    if delayed:
        stage = costs.moe_parts[members[1][1]]
        total = costs.backward_weight_ms[members[1][1]]
        weight = [total] if stage is None else list(stage.weight_fitted(total))
    length, after = {}, {}  # node -> duration, node -> the nodes it waits for
    for c, parts in enumerate(chains):
        previous = None
        for j, ms in enumerate(parts.compute_ms):
            for node, value in ((("c", c, j), ms), (("m", c, j), None)):
                if value is None and j == len(parts.comm_ms):
                    break
                length[node] = value if value is not None else parts.comm_ms[j]
                after[node] = [previous] if previous else []
                previous = node
    for j, ms in enumerate(weight):
        length[("w", 2, j)], after[("w", 2, j)] = ms, [("c", 1, j)]
    for stream, chained in (("c", (1, 0, 2)), ("m", (1, 0))):
        order = [
            node
            for j in range(max(len(p.compute_ms) for p in chains))
            for c in chained
            for node in [("w" if c == 2 else stream, c, j)]
            if node in length
        ]
        for earlier, later in zip(order, order[1:], strict=False):
            after[later].append(earlier)
    end = dict.fromkeys(length, 0.0)
    for _ in range(len(length) + 1):
        end = {n: max([end[p] for p in after[n]], default=0.0) + length[n] for n in length}
    return max(end.values(), default=0.0)

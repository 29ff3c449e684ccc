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

from pipesim.schedules.ir import OVERLAP_F_B, B, F, I


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
            f, b = action.sub_actions
            return costs.overlapped_ms(ms(f.stage), b.kind, ms(b.stage))
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
                inputs = [known(k) for atom in actions[d][pointer[d]].atoms for k in needs(atom)]
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

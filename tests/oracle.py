"""An independent list-scheduling evaluator: start and end times without SimPy.

It walks the devices round-robin, running each device's next action as soon as all its
inputs have a known arrival time (the idea of zero-bubble's ``add_time`` pass). Links are
FIFO per directed pair; a pair has one sender, so its order is the sender's program order.
Returns ``{(device, step): (start, end)}``, or raises RuntimeError on a deadlock.
"""

from pipesim.schedules.ir import OVERLAP_F_B, B, F, I


def evaluate(schedule, costs, topology=None):
    times, device_free, pointer, arrival, link_free = (
        {},
        [0.0] * schedule.devices,
        [0] * schedule.devices,
        {},
        {},
    )
    done = {}  # (stage, kind, mb) -> end time, for same-device order checks

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

    progress = True
    while progress:
        progress = False
        for d, actions in enumerate(schedule.device_actions):
            while pointer[d] < len(actions):
                action = actions[pointer[d]]
                keys = [k for atom in action.atoms for k in needs(atom)]
                ready = [known(k) for k in keys]
                if any(r is None for r in ready):
                    break
                start = max([device_free[d], *ready])
                end = start + duration(action) + costs.overhead_ms
                times[(d, pointer[d])] = (start, end)
                free = end
                for atom in action.atoms:
                    done[(atom.stage, atom.kind, atom.microbatch)] = end
                    if atom.kind == F and schedule.next_stage(atom.stage) is not None:
                        dst_stage, key = atom.stage + 1, ("act", atom.stage + 1, atom.microbatch)
                    elif atom.kind in (B, I) and schedule.prev_stage(atom.stage) is not None:
                        dst_stage, key = atom.stage - 1, ("grad", atom.stage - 1, atom.microbatch)
                    else:
                        continue
                    dst = schedule.placement[dst_stage]
                    if dst == d or topology is None or topology.link(d, dst).is_ideal:
                        arrival[key] = end
                        continue
                    nbytes = costs.activation_bytes[
                        schedule.model_stage(min(atom.stage, dst_stage))
                    ]
                    begin = max(end, link_free.get((d, dst), 0.0))
                    arrival[key] = link_free[(d, dst)] = begin + topology.link(d, dst).transfer_ms(
                        nbytes
                    )
                    if not topology.comm_overlap:
                        free = max(free, arrival[key])
                device_free[d] = free
                pointer[d] += 1
                progress = True
    if any(p < len(a) for p, a in zip(pointer, schedule.device_actions, strict=True)):
        raise RuntimeError("deadlock")
    return times

"""Runtime posts in the engine: torch's lowered schedules, run as its runtime runs them.

A schedule read from torch's lowered CSV keeps the points where each rank posts its
sends and receives, its FSDP gathers and frees and its gradient reductions
(``Schedule.posts``, ``pipesim.schedules.posts``). A device meets its posts in program
order between its compute actions, and a post is made the moment the device reaches it:
when the action before it ends (time 0 at the head of the list). Then:

* ``SEND_F``/``SEND_B`` and ``RECV_F``/``RECV_B``: a transfer between two ranks leaves
  when its SEND is posted on the sender and its RECV on the receiver, whichever comes
  later (a rendezvous, as NCCL's point-to-point operations are), and never before its
  producer ends (the validator keeps each SEND after its producer). Then its link takes
  it as usual: channel queue, channel time, latency. So a receive posted later than the
  data could have arrived delays its consumer, and a send posted late holds the data
  back. The transfer row's cause is the row whose end released it: its producer, or the
  action before the late post. Stages on one rank hand over at once, without posts.
  With ``comm_overlap`` off a SEND holds its device until the transfer arrives.
* A schedule without SEND/RECV posts (torch's compute-only form, which may hold
  ``REDUCE_GRAD``) ships every output when its producer ends, as the engine always does.
* ``REDUCE_GRAD`` of stage s: the data-parallel reduction of that stage's gradients,
  ``Costs.reduce_grad_ms`` (the scenario's all-reduce for that stage; nothing if none),
  then the optimizer step joined to it (``Costs.optimizer_ms``; nothing if none). The
  device waits for them before its next action (torch's FSDP post-backward syncs the
  reduction into the compute stream). Each is a row naming the stage, an all-reduce row
  and an optimizer row. Posts that place the reductions replace the per-device
  end-of-step tail.
* ``UNSHARD`` of stage s starts gathering its parameters (``Costs.unshard_ms``) on the
  device's gather stream, one gather after another; the device goes on, and its later
  compute actions on stage s wait for the gather. ``RESHARD`` frees them and holds the
  device for ``Costs.reshard_ms``. Both cost nothing unless given.

Posts that cost nothing leave no row; the others leave one each (``RowKind.ALLREDUCE``
and ``RowKind.OPTIMIZER`` naming the stage, ``RowKind.UNSHARD``, ``RowKind.RESHARD``), on
the communication lane.
Which transfer a SEND or RECV belongs to is the dependency rule's answer
(``pipesim.schedules.dependencies``).
"""

from __future__ import annotations

from pipesim.schedules.dependencies import Message, dependencies
from pipesim.schedules.ir import Action, B, F, Schedule
from pipesim.schedules.posts import (
    P2P_KINDS,
    RECV_B,
    RECV_F,
    REDUCE_GRAD,
    RESHARD,
    SEND_B,
    SEND_F,
    UNSHARD,
    Post,
)
from pipesim.schedules.validity import validate_posts
from pipesim.sim.engine.channels import Request
from pipesim.sim.engine.rules import input_key, key_parts
from pipesim.sim.trace import Cause, RowKind

# torch's post kind -> (the kind of action whose transfer it is, whether it sends)
_ENDS = {SEND_F: (F, True), RECV_F: (F, False), SEND_B: (B, True), RECV_B: (B, False)}
_START, _DEVICE, _INPUT = int(Cause.START), int(Cause.DEVICE), int(Cause.INPUT)
_CHANNEL, _SENDING, _GATHER = int(Cause.CHANNEL), int(Cause.SENDING), int(Cause.GATHER)


class Rendezvous:
    """The posts of one run (``run``: the engine's ``Run``) and a device worker that makes
    them. Book-keeping is by the engine's input keys: a transfer is known by the key of
    the input it becomes at its receiver."""

    def __init__(self, run) -> None:
        schedule: Schedule = run.schedule
        validate_posts(schedule)
        if run.tail_ms is not None and schedule.has_reduce_grad_posts:
            raise ValueError(
                "the schedule's REDUCE_GRAD posts place the gradient all-reduce: give its "
                "time as Costs.reduce_grad_ms, not as tail_ms"
            )
        self.run, self.schedule, self.p2p = run, schedule, schedule.has_p2p_posts
        self.deps = dependencies(schedule)
        self.at: list[dict[int, list[Post]]] = []  # device -> compute step -> posts before it
        for placed in schedule.posts:
            by_step: dict[int, list[Post]] = {}
            for step, post in placed:
                by_step.setdefault(step, []).append(post)
            self.at.append(by_step)
        self.outputs: dict[int, tuple] = {}  # key -> (sender, atom, target, producer row)
        self.sends: dict[int, tuple[float, int]] = {}  # key -> (posted at, row before)
        self.recvs: dict[int, tuple[float, int]] = {}
        self.sent: dict[int, Request] = {}  # key -> its channel request (blocking sends)
        self.leaving: dict[int, object] = {}  # key -> event: a blocked sender waits for it
        self.gathered: dict[int, tuple[float, int]] = {}  # stage -> (parameters there, row)
        self.gather_free = [(0.0, -1)] * schedule.devices  # the last gather: (end, row)

    # -- the worker ------------------------------------------------------------------

    def device(self, device: int, actions: tuple[Action, ...]):
        """One device's list with its posts: the engine's general step, posts between."""
        since = (0.0, _START, -1)  # (when the device falls free, cause, cause row)
        at = self.at[device] if device < len(self.at) else {}
        for step, action in enumerate(actions):
            if step in at:
                since = yield from self._posts(device, step, at[step], since)
            since = yield from self._compute(device, step, action, since)
        if len(actions) in at:
            since = yield from self._posts(device, len(actions), at[len(actions)], since)
        yield from self.run.finish(device, *since)

    def _compute(self, device: int, step: int, action: Action, since: tuple):
        run = self.run
        order, cells = run.order, run.order.cells[device]
        free, cause, cause_row = since
        for atom in action.atoms:
            rule = run.rules[atom.kind]
            cell = cells[atom.stage] + atom.microbatch
            if order.progress[cell] != rule.before or not 0 <= atom.microbatch < run.width:
                order.out_of_order(device, step, atom)
            order.progress[cell] = rule.after
            gathered, gather_row = self.gathered.get(atom.stage, (0.0, -1))
            if gathered > free:  # its parameters are still being gathered
                free, cause, cause_row = gathered, _GATHER, gather_row
            if rule.inputs[atom.stage] is None:
                continue
            key = rule.inputs[atom.stage] + 2 * atom.microbatch
            if key not in run.arrival_at:
                yield run.wait(device, step, key)
            ready, row = run.arrival_at.pop(key)
            if ready > free:
                free, cause, cause_row = ready, _INPUT, row
        end = free + run.duration(device, action) + run.overhead
        yield run.env.timeout(max(end - run.env.now, 0.0))
        row = run.record(device, action, free, end, (cause, cause_row))
        if not self.p2p:  # outputs leave when produced, as without posts
            sent = run.ship(device, action, end, row)
            if sent and not run.topology.comm_overlap:
                return (yield from run.hold(end, sent, row))
            return end, _DEVICE, row
        for atom in action.atoms:
            self._produced(device, atom, end, row)
        return end, _DEVICE, row

    # -- posts -----------------------------------------------------------------------

    def _posts(self, device: int, step: int, posts: list[Post], since: tuple):
        run = self.run
        for post in posts:
            if post.kind in P2P_KINDS:
                key = self._key(post)
                sending = post.kind in (SEND_F, SEND_B)
                (self.sends if sending else self.recvs)[key] = (since[0], since[2])
                self._try_leave(key)
                if sending and not run.topology.comm_overlap:
                    since = yield from self._hold(device, step, key, since)
                continue
            model_stage = run.model_stage[post.stage]
            cost = run.costs.post_ms(post.kind, model_stage)
            if post.kind == REDUCE_GRAD:  # the reduction, then the optimizer step joined to it
                steps = run.costs.optimizer_ms
                step = 0.0 if steps is None else steps[model_stage]
                since = yield from self._held(device, post.stage, RowKind.ALLREDUCE, cost, since)
                since = yield from self._held(device, post.stage, RowKind.OPTIMIZER, step, since)
            elif post.kind == UNSHARD and cost > 0:  # on the gather stream: the device goes on
                self._gather(device, post, cost, since)
            elif post.kind == RESHARD:
                since = yield from self._held(device, post.stage, RowKind.RESHARD, cost, since)
        return since

    def _held(self, device: int, stage: int, code: RowKind, cost: float, since: tuple):
        """Work that holds the device (a reduction, an optimizer step, a free): its row,
        and the device free again at its end; nothing where it costs nothing."""
        if cost <= 0:
            return since
        run = self.run
        free, _, before = since
        end = free + cost
        yield run.env.timeout(max(end - run.env.now, 0.0))
        row = run.record_beside(device, stage, code, free, end, (_DEVICE, before))
        return end, _DEVICE, row

    def _gather(self, device: int, post: Post, cost: float, since: tuple) -> None:
        free, _, before = since
        begin, cause, cause_row = free, _DEVICE, before
        if self.gather_free[device][0] > free:  # behind the previous gather
            (begin, cause_row), cause = self.gather_free[device], _CHANNEL
        end = begin + cost
        row = self.run.record_beside(
            device, post.stage, RowKind.UNSHARD, begin, end, (cause, cause_row)
        )
        self.gather_free[device] = self.gathered[post.stage] = (end, row)

    def _key(self, post: Post) -> int:
        """The input key of the transfer a SEND or RECV post belongs to."""
        kind, sending = _ENDS[post.kind]
        deps = self.deps
        hop = deps.outgoing(kind, post.stage) if sending else deps.incoming(kind, post.stage)
        return input_key(hop.receiver, hop.message, post.microbatch, self.run.width)

    def _post_text(self, key: int) -> str:
        """``0SEND_F1``: the SEND post of the transfer ``key``."""
        message, stage, microbatch = key_parts(key, self.run.width)
        send = SEND_F if message == Message.ACTIVATION else SEND_B
        return f"{self.deps.sender(message, stage)}{send}{microbatch}"

    def _produced(self, device: int, atom: Action, end: float, row: int) -> None:
        target = self.run.rules[atom.kind].outputs[atom.stage]
        if target is None:
            return
        key = target.key + 2 * atom.microbatch
        if target.dst == device:  # the next stage on this rank: handed over at once
            self.run.deliver(key, end, row)
            return
        self.outputs[key] = (device, atom, target, row)
        self._try_leave(key)

    def _try_leave(self, key: int) -> None:
        """Send the transfer ``key`` once it is produced and both its ends are posted."""
        if key not in self.outputs or key not in self.sends or key not in self.recvs:
            return
        device, atom, target, _ = self.outputs.pop(key)
        (send_at, send_row), (recv_at, recv_row) = self.sends.pop(key), self.recvs.pop(key)
        ready, released_by = (recv_at, recv_row) if recv_at > send_at else (send_at, send_row)
        request = Request(
            ready, device, atom, key, target.dst, target.occupancy, target.latency, released_by
        )
        self.run.offer(request, target.channel, target.shared)
        if not self.run.topology.comm_overlap:
            self.sent[key] = request  # its sender holds on it (_hold)
        if key in self.leaving:
            self.leaving.pop(key).succeed()

    def _hold(self, device: int, step: int, key: int, since: tuple):
        """A blocking send (``comm_overlap`` off): busy until the transfer has arrived."""
        run = self.run
        if key not in self.sent:  # its receiver has not posted the RECV yet
            last = len(self.schedule.device_actions[device]) - 1
            run.order.waits[device] = (
                min(step, last),
                f"{self._post_text(key)} waits for its RECV",
            )
            self.leaving[key] = run.env.event()
            yield self.leaving[key]
            del run.order.waits[device]
        request = self.sent.pop(key)
        if request.arrival is None:
            yield request.grant  # a shared channel serves it at the end of this instant
        if request.arrival <= since[0]:
            return since
        yield run.env.timeout(max(request.arrival - run.env.now, 0.0))
        return request.arrival, _SENDING, request.row

"""The state of one simulation run: clock, replicas, links, routers, records, wanted schedules.

Everything a run mutates lives here (and in the entities it holds), created fresh per run, so
two runs in one process are independent and identical for one seed. State records what is
*wanted* -- a replica that should look for work (:meth:`SimState.want_schedule`) -- and never
creates events: only the event loop (:mod:`pdtrt.sim.simulator`) turns wants into events, so
this module does not import ``pdtrt.sim.events`` (vidur's layering).
"""

from __future__ import annotations

from collections import deque

from pdtrt.enums import ServingMode
from pdtrt.perf.link import kv_transfer_s
from pdtrt.perf.scheduling import kv_blocks
from pdtrt.prefill_policy import PrefillPath, PrefillPolicy, Reason, choose_path
from pdtrt.sim.config import SimConfig
from pdtrt.sim.entities import Link, Replica, ReplicaRole, Request
from pdtrt.sim.scheduling import ROUTERS, RoutingPolicy
from pdtrt.sim.workload import Conversation, RequestSpec

__all__ = ["SimState"]


class SimState:
    def __init__(self, config: SimConfig) -> None:
        self.config = config
        self.now_s = 0.0
        self.num_events = 0
        s = config.serving
        seq = config.max_seq_len
        self.replicas: dict[ReplicaRole, list[Replica]] = {}
        if s.mode is ServingMode.AGGREGATED:
            kv = s.prefill.memory(seq).kv_blocks
            self.replicas[ReplicaRole.AGGREGATED] = [
                Replica(index=i, role=ReplicaRole.AGGREGATED, instance=s.prefill, kv_blocks=kv)
                for i in range(s.prefill_instances)]
        else:
            assert s.decode is not None
            kv_p = s.prefill.memory(config.max_isl).kv_blocks
            kv_d = s.decode.memory(seq).kv_blocks
            self.replicas[ReplicaRole.PREFILL] = [
                Replica(index=i, role=ReplicaRole.PREFILL, instance=s.prefill, kv_blocks=kv_p)
                for i in range(s.prefill_instances)]
            decodes = [s.decode] * s.decode_instances + [
                inst for inst, n in config.extra_decode for _ in range(n)]
            self.replicas[ReplicaRole.DECODE] = [
                Replica(index=i, role=ReplicaRole.DECODE, instance=inst,
                        kv_blocks=kv_d if inst is s.decode else inst.memory(seq).kv_blocks)
                for i, inst in enumerate(decodes)]
        self.links = [Link(index=i) for i in range(len(self.replicas.get(ReplicaRole.DECODE,
                                                                          [])))]
        # kv-aware is least-loaded with its cost first (State.choose)
        self.route_entry = ROUTERS.get(config.routing, ROUTERS[RoutingPolicy.LEAST_LOADED])()
        self.route_decode = ROUTERS[config.decode_routing]()
        self.requests: list[Request] = []
        self.closed_loop_backlog: deque[Conversation] = deque()
        self.conversations: dict[int, Conversation] = {}  # the turns still to send
        self.schedule_pending: set[tuple[ReplicaRole, int]] = set()  # an event exists
        self.schedule_wanted: list[tuple[ReplicaRole, int]] = []  # the loop creates it
        self.itl_time_s: list[float] = []
        self.itl_s: list[float] = []

    @property
    def entry_role(self) -> ReplicaRole:
        return (ReplicaRole.AGGREGATED if ReplicaRole.AGGREGATED in self.replicas
                else ReplicaRole.PREFILL)

    def replica(self, role: ReplicaRole, index: int) -> Replica:
        return self.replicas[role][index]

    def new_request(self, spec: RequestSpec, *, sent_s: float) -> Request:
        req = Request(id=len(self.requests), arrival_s=sent_s, isl=spec.isl, osl=spec.osl,
                      conversation=spec.conversation, turn=spec.turn)
        self.requests.append(req)
        return req

    def next_turn(self, req: Request) -> RequestSpec | None:
        """The turn of ``req``'s conversation that follows it, if any."""
        turns = self.conversations.get(req.conversation, ())
        return turns[req.turn + 1] if req.turn + 1 < len(turns) else None

    def cached_prefix(self, req: Request, replica: Replica) -> int:
        """Prompt tokens of ``req`` a replica's block cache holds: the longest prefix it keeps
        (its conversation so far, or the shared prefix), in whole blocks, within the prompt's
        first ``isl - 1`` tokens (one token is always computed)."""
        tpb = replica.instance.tokens_per_block
        held = replica.held.get(req.conversation, 0)
        if replica.prefix_warm:
            held = max(held, self.config.workload.shared_prefix)
        return min(held, req.isl - 1) // tpb * tpb

    def choose(self, role: ReplicaRole, req: Request) -> Replica:
        """The replica of ``role`` that gets ``req``: with kv-aware routing the least
        ``(isl - cached there) x kv_overlap_weight + outstanding tokens`` (the router's
        ``_kv_cost``), then the least loaded, then the least recently chosen; for decode with
        kv-capacity routing the least :func:`capacity_used` first; otherwise the entry pool's
        policy, and the decode routing for decode."""
        replicas = self.replicas[role]
        route = self.route_decode if role is ReplicaRole.DECODE else self.route_entry
        if role is ReplicaRole.DECODE and \
                self.config.decode_routing is RoutingPolicy.KV_CAPACITY:
            return route(replicas, lambda r: capacity_used(r, req))
        if self.config.routing is RoutingPolicy.KV_AWARE:
            w = self.config.kv_overlap_weight
            return route(replicas, lambda r: (
                w * (req.isl - self.cached_prefix(req, r)) + r.outstanding_tokens))
        return route(replicas)

    def local_prefill_reason(self, req: Request, decode: Replica) -> Reason | None:
        """Conditional disaggregation: why ``decode`` prefills ``req`` itself (None: it does
        not), by the router's rule (:func:`pdtrt.prefill_policy.choose_path`); the prefill
        pool's queue depth is the requests its least loaded replica holds (the router's
        calls in flight per instance at its least loaded endpoint)."""
        if not self.config.conditional:
            return None
        policy = PrefillPolicy(max_local_prefill=self.config.max_local_prefill_tokens,
                               max_prefill_queue_depth=self.config.max_prefill_queue_depth,
                               local_prefill_limit=decode.instance.max_num_tokens)
        prefills = self.replicas.get(ReplicaRole.PREFILL, [])
        path, reason = choose_path(
            policy, prompt_tokens=req.isl, cached_tokens=self.cached_prefix(req, decode),
            has_aggregated=False,
            prefill_queue_depth=min(r.load for r in prefills) if prefills else None)
        return reason if path is PrefillPath.LOCAL else None

    def kv_transfer_s(self, req: Request) -> float:
        s = self.config.serving
        assert s.link is not None
        return kv_transfer_s(s.link, req.isl, self.kv_bytes_per_token)

    @property
    def kv_bytes_per_token(self) -> int:
        s = self.config.serving
        return s.prefill.model.kv_bytes_per_token(s.prefill.kv_dtype)

    @property
    def request_overhead_s(self) -> float:
        """Time from a client's send to the engines (counts in TTFT, occupies no GPU)."""
        return self.config.factors_prefill.request_overhead_s

    def want_schedule(self, role: ReplicaRole, index: int) -> None:
        """Ask for a schedule of a replica now, unless one is pending or it is busy stepping.
        Decode replicas are woken while busy too: they admit KV hand-offs between steps."""
        key = (role, index)
        busy = self.replica(role, index).busy and role is not ReplicaRole.DECODE
        if key in self.schedule_pending or busy:
            return
        self.schedule_pending.add(key)
        self.schedule_wanted.append(key)

    def take_wanted_schedules(self) -> list[tuple[ReplicaRole, int]]:
        """The schedules asked for since the last call, in the order they were asked for."""
        wanted, self.schedule_wanted = self.schedule_wanted, []
        return wanted

    def schedule_done(self, role: ReplicaRole, index: int) -> None:
        self.schedule_pending.discard((role, index))

    def record_itl(self, itl_s: float) -> None:
        self.itl_time_s.append(self.now_s)
        self.itl_s.append(itl_s)


def capacity_used(replica: Replica, req: Request) -> float:
    """The router's ``kv_capacity`` cost (:mod:`pdtrt.runtime.router.kv_capacity`): the used
    fraction of ``replica``'s KV blocks once ``req`` is there -- the larger of its used blocks
    and the whole length of every request it holds, plus ``req``'s whole length."""
    tpb = replica.instance.tokens_per_block
    held = (*replica.waiting, *replica.local_waiting, *replica.prefilling, *replica.decoding)
    reserved = sum(kv_blocks(q.isl + q.osl, tpb) for q in held)
    return (max(replica.used_blocks, reserved) + kv_blocks(req.isl + req.osl, tpb)) \
        / replica.kv_blocks

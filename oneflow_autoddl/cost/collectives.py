"""Alpha-beta costs of the collectives behind each SBP transition on one mesh axis.

`group_bytes` is the tensor as the group along that axis sees it (already divided by
the splits on the other mesh axes); `p` is the axis size. Bytes are what one device
sends, the quantity the OneFlow CPU runtime lets us measure exactly.
"""

from dataclasses import dataclass
from typing import Iterable

from .cluster import Link


@dataclass(frozen=True)
class Transfer:
    bytes: float  # sent by one device
    time: float
    latency: float = (
        0.0  # of `time`, the alpha terms: waiting on peers, not moving bytes (cost.schedule)
    )
    inter_node_bytes: float = 0.0  # sent to devices on other nodes, as the links carry them

    def __add__(self, other: "Transfer") -> "Transfer":
        return added((self, other))

    def scaled(self, k: float) -> "Transfer":
        return Transfer(self.bytes * k, self.time * k, self.latency * k, self.inter_node_bytes * k)


FREE = Transfer(0.0, 0.0)


def added(transfers: Iterable[Transfer]) -> Transfer:
    """The transfers one after another: each field added up in their order, with one Transfer
    made (a plan's costing adds up thousands)."""
    sent = time = latency = inter_node = 0.0
    for tr in transfers:
        sent += tr.bytes
        time += tr.time
        latency += tr.latency
        inter_node += tr.inter_node_bytes
    return Transfer(sent, time, latency, inter_node)


def ring(steps: int, sent: float, link: Link) -> Transfer:
    """`steps` rounds of latency plus `sent` bytes at the link's bandwidth."""
    return Transfer(sent, steps * link.latency + sent / link.bandwidth, steps * link.latency)


def all_gather(group_bytes: float, p: int, link: Link) -> Transfer:
    return ring(p - 1, group_bytes * (p - 1) / p, link)


def reduce_scatter(group_bytes: float, p: int, link: Link) -> Transfer:
    return ring(p - 1, group_bytes * (p - 1) / p, link)


def all_reduce(group_bytes: float, p: int, link: Link) -> Transfer:
    return ring(2 * (p - 1), 2 * group_bytes * (p - 1) / p, link)


def all_to_all(group_bytes: float, p: int, link: Link) -> Transfer:
    return ring(p - 1, group_bytes * (p - 1) / (p * p), link)

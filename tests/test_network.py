"""Hand-computed fluid-network cases: fair sharing, max-min fairness, rate changes."""

import numpy as np
import pytest
import simpy

from simulator.network import FlowClass, FlowShape, FluidNetwork, max_min_rates


def _shape(*links: int, count: int = 1) -> FlowShape:
    return FlowShape(links=links, counts=(count,) * len(links))


def _finish_times(capacity: list[float], classes: list[list[FlowClass]],
                  starts_s: list[float]) -> list[float]:
    env = simpy.Environment()
    done: list[float] = [float("nan")] * len(classes)

    def schedule(delay_s, callback):
        env.timeout(delay_s).callbacks.append(lambda _: callback())

    network = FluidNetwork(capacity_bytes_per_s=np.array(capacity), now=lambda: env.now,
                           schedule=schedule)

    def start(i):
        yield env.timeout(starts_s[i])
        network.start(classes[i], on_done=lambda: done.__setitem__(i, env.now))

    for i in range(len(classes)):
        env.process(start(i))
    env.run()
    return done


def test_two_flows_sharing_a_link_each_get_half():
    rates = max_min_rates([_shape(0), _shape(0)], np.array([100.0]))
    assert rates.tolist() == [50.0, 50.0]


def test_max_min_fairness_three_flows_over_two_links():
    # link 0 (1 B/s) carries flows a, b; link 1 (2 B/s) carries b, c.
    # Link 0 saturates first at 0.5 each; c then takes what b leaves on link 1: 1.5.
    rates = max_min_rates([_shape(0), _shape(0, 1), _shape(1)], np.array([1.0, 2.0]))
    assert rates == pytest.approx([0.5, 0.5, 1.5])


def test_flow_counts_multiply_link_usage():
    # A class of 4 identical flows on a 100 B/s link next to one single flow: 5 equal shares.
    rates = max_min_rates([_shape(0, count=4), _shape(0)], np.array([100.0]))
    assert rates == pytest.approx([20.0, 20.0])


def test_a_link_a_shape_names_twice_carries_both_counts():
    # The first class names link 2 twice (1 + 2 flows) and link 0 once; with the second
    # class's one flow, link 2's 100 B/s is cut into four equal shares.
    twice = FlowShape(links=(2, 0, 2), counts=(1, 1, 2))
    rates = max_min_rates([twice, _shape(2)], np.array([1000.0, 5.0, 100.0]))
    assert rates.tolist() == [25.0, 25.0]


def test_bandwidth_is_handed_back_when_a_flow_ends():
    # 1 B/s link; flows of 1 and 3 bytes start together: 0.5 B/s each until t=2, then the
    # second has 2 bytes left at 1 B/s: done at t=4.
    small = [FlowClass(shape=_shape(0), bytes_per_flow=1.0)]
    large = [FlowClass(shape=_shape(0), bytes_per_flow=3.0)]
    assert _finish_times([1.0], [small, large], [0.0, 0.0]) == pytest.approx([2.0, 4.0])


def test_late_flow_slows_an_earlier_one():
    # 2 B/s link: A (4 bytes) alone for 1 s (2 bytes moved), then B (1 byte) joins at 1 B/s
    # each: B done at t=2, A has 1 byte left at 2 B/s: done at t=2.5.
    a = [FlowClass(shape=_shape(0), bytes_per_flow=4.0)]
    b = [FlowClass(shape=_shape(0), bytes_per_flow=1.0)]
    assert _finish_times([2.0], [a, b], [0.0, 1.0]) == pytest.approx([2.5, 2.0])


def test_transfer_ends_when_its_slowest_class_ends():
    # One transfer of two classes on separate 1 B/s links, 1 and 2 bytes: done at t=2.
    transfer = [FlowClass(shape=_shape(0), bytes_per_flow=1.0),
                FlowClass(shape=_shape(1), bytes_per_flow=2.0)]
    assert _finish_times([1.0, 1.0], [transfer], [0.0]) == pytest.approx([2.0])


def test_empty_transfer_finishes_at_once():
    empty = [FlowClass(shape=_shape(0), bytes_per_flow=0.0)]
    assert _finish_times([1.0], [empty], [3.0]) == pytest.approx([3.0])


def test_more_capacity_never_lowers_the_slowest_flow():
    # Max-min fairness maximises the smallest rate; more capacity only enlarges the choice.
    # (A single flow may lose: a faster neighbour can take more of a shared link.)
    shapes = [_shape(0), _shape(0, 1), _shape(1), _shape(1, 2)]
    base = max_min_rates(shapes, np.array([1.0, 2.0, 3.0]))
    for link in range(3):
        capacity = np.array([1.0, 2.0, 3.0])
        capacity[link] *= 2
        assert max_min_rates(shapes, capacity).min() >= base.min() - 1e-12


def test_a_flow_that_ends_as_another_starts_is_not_lost():
    # A (1 byte at 1 B/s) ends at t=1 exactly when B starts: B must not stall A's completion.
    a = [FlowClass(shape=_shape(0), bytes_per_flow=1.0)]
    b = [FlowClass(shape=_shape(0), bytes_per_flow=1.0)]
    assert _finish_times([1.0], [a, b], [0.0, 1.0]) == pytest.approx([1.0, 2.0])


def test_a_flow_across_two_links_slows_both_neighbours_and_hands_back():
    # 10 B/s links 0 and 1: A (20 bytes) on link 0 and B (40 bytes) on link 1 run apart until
    # C (5 bytes over both links) starts at t=1: A, B and C get 5 B/s each, C ends at t=2, A
    # (5 bytes left) at t=2.5 and B (25 bytes left) at t=4.5 back at 10 B/s.
    a = [FlowClass(shape=_shape(0), bytes_per_flow=20.0)]
    b = [FlowClass(shape=_shape(1), bytes_per_flow=40.0)]
    c = [FlowClass(shape=_shape(0, 1), bytes_per_flow=5.0)]
    assert _finish_times([10.0, 10.0], [a, b, c], [0.0, 0.0, 1.0]) == pytest.approx(
        [2.5, 4.5, 2.0])


def test_flows_on_separate_links_keep_their_own_pace_beside_busy_ones():
    # Link 0 (1 B/s) carries A and B (2 bytes each, 0.5 B/s each: done at t=4); C (3 bytes)
    # starts on link 1 (3 B/s) at t=0.5 and ends at t=1.5, never slowed by them.
    a = [FlowClass(shape=_shape(0), bytes_per_flow=2.0)]
    b = [FlowClass(shape=_shape(0), bytes_per_flow=2.0)]
    c = [FlowClass(shape=_shape(1), bytes_per_flow=3.0)]
    assert _finish_times([1.0, 3.0], [a, b, c], [0.0, 0.0, 0.5]) == pytest.approx(
        [4.0, 4.0, 1.5])

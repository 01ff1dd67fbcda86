"""Reference LUT-FSM: every reason code, the counters' ranges, fallback and recovery."""

from __future__ import annotations

import random

import pytest

from mi_certify.runtime.fsm import FsmConfig, LutFsm, MaskBox, Reason, allowed_at

# LUT of 4 addresses: 0 -> keep(0) confident, 1 -> int4(2) confident, 2 -> int4 not confident,
# 3 -> merge(1) confident. Conservative token 0.
TOKENS = [0, 2, 2, 1]
CONF = [1, 1, 0, 1]


# a property forbidding int4 (token 2) at address 2 (one input of 2 bits)
NO_INT4_AT_2 = (MaskBox("P", (2,), (2,), (2,), 0b1011),)


def machine(h=3, d=2, w=2, r=3, masks=()) -> LutFsm:
    return LutFsm(FsmConfig(n_actions=4, conservative=0, hysteresis=h, cooldown=d, violations_to_fallback=w,
                            recovery=r), TOKENS, CONF, masks)


def run(m: LutFsm, seq):
    """seq of addr or (addr, fault, viol); returns [(token, reason name)]."""
    out = []
    for item in seq:
        addr, fault, viol = item if isinstance(item, tuple) else (item, False, False)
        res = m.step(addr, fault, viol)
        out.append((res.token, res.reason.name))
    return out


def test_reset_state_holds_the_conservative_action():
    assert run(machine(), [0, 0]) == [(0, "HOLD"), (0, "HOLD")]


def test_hysteresis_switches_after_h_confident_proposals_then_cooldown():
    assert run(machine(h=3, d=2), [1, 1, 1, 1, 1, 1]) == [
        (0, "PENDING"), (0, "PENDING"), (2, "SWITCH"), (2, "COOLDOWN"), (2, "COOLDOWN"), (2, "HOLD")]


def test_hysteresis_one_switches_at_once():
    assert run(machine(h=1, d=0), [1, 3, 0]) == [(2, "SWITCH"), (1, "SWITCH"), (0, "SWITCH")]


def test_low_confidence_resets_the_count():
    assert run(machine(h=2, d=0), [1, 2, 1, 1]) == [
        (0, "PENDING"), (0, "LOW_CONFIDENCE"), (0, "PENDING"), (2, "SWITCH")]


def test_a_new_candidate_restarts_the_count():
    assert run(machine(h=2, d=0), [1, 3, 1, 1]) == [
        (0, "PENDING"), (0, "PENDING"), (0, "PENDING"), (2, "SWITCH")]


def test_proposal_equal_to_active_is_hold_and_resets_count():
    m = machine(h=2, d=0)
    assert run(m, [1, 0, 1]) == [(0, "PENDING"), (0, "HOLD"), (0, "PENDING")]
    assert m.state.h == 1


def test_probe_fault_forces_conservative_in_the_same_step_even_in_cooldown():
    m = machine(h=1, d=5)
    assert run(m, [1, (1, True, False)]) == [(2, "SWITCH"), (0, "PROBE_FAULT")]
    assert m.state.f and m.state.d == 0


def test_w_consecutive_violations_fall_back_and_r_compliant_steps_recover_into_cooldown():
    m = machine(h=1, d=2, w=2, r=3)
    seq = [1, (1, False, True), (1, False, True), 1, 1, 1, 1, 1, 1]
    assert run(m, seq) == [(2, "SWITCH"), (2, "COOLDOWN"), (0, "FALLBACK"), (0, "FALLBACK"), (0, "FALLBACK"),
                           (0, "RECOVER"), (0, "COOLDOWN"), (0, "COOLDOWN"), (2, "SWITCH")]


def test_a_compliant_step_resets_the_violation_count():
    m = machine(h=1, d=0, w=2)
    assert run(m, [(0, False, True), (0, False, False), (0, False, True), (0, False, True)]) == [
        (0, "HOLD"), (0, "HOLD"), (0, "HOLD"), (0, "FALLBACK")]


def test_a_violation_in_fallback_restarts_recovery():
    m = machine(h=1, d=0, w=1, r=2)
    assert run(m, [(0, False, True), 0, (0, False, True), 0, 0]) == [
        (0, "FALLBACK"), (0, "FALLBACK"), (0, "FALLBACK"), (0, "FALLBACK"), (0, "RECOVER")]


def test_reset_returns_to_the_initial_state():
    m = machine(h=1, d=4)
    run(m, [1])
    m.reset()
    assert m.state.t == 0 and m.state.d == 0
    assert run(m, [0]) == [(0, "HOLD")]


@pytest.mark.parametrize("h,d,w,r", [(1, 0, 1, 1), (3, 2, 2, 3), (4, 7, 3, 5)])
def test_counters_stay_in_range_on_random_sequences(h, d, w, r):
    m = machine(h, d, w, r, NO_INT4_AT_2)
    rng = random.Random(h * 100 + d)
    seen = set()
    for _ in range(5000):
        addr, fault = rng.randrange(4), rng.random() < 0.02
        res = m.step(addr, fault, rng.random() < 0.3)
        s = res.after
        seen.add(res.reason)
        assert 0 <= s.h <= h - 1 and 0 <= s.d <= d and 0 <= s.v <= w - 1 and 0 <= s.r <= r - 1
        assert s.t in range(4)
        assert fault or (allowed_at(NO_INT4_AT_2, addr) >> s.t) & 1  # the property holds on the active token
        if s.f:
            assert s.t == 0
    expected = set(Reason) - ({Reason.PENDING} if h == 1 else set()) - ({Reason.COOLDOWN} if d == 0 else set())
    assert seen == expected


def test_lut_with_undeclared_token_is_rejected():
    with pytest.raises(ValueError, match="not a declared action"):
        LutFsm(FsmConfig(2, 0, 1, 0, 1, 1), [0, 5], [1, 1])


def test_an_active_action_a_property_forbids_is_replaced_at_once_even_in_cooldown():
    m = machine(h=1, d=5, masks=NO_INT4_AT_2)
    assert run(m, [1, 1, 2, 2, 3]) == [(2, "SWITCH"), (2, "COOLDOWN"), (0, "MASKED"), (0, "COOLDOWN"),
                                       (0, "COOLDOWN")]
    assert m.state.d == 3 and m.state.k == 0 and m.state.h == 0
    unmasked = machine(h=1, d=5)
    assert run(unmasked, [1, 1, 2]) == [(2, "SWITCH"), (2, "COOLDOWN"), (2, "COOLDOWN")]  # int4 stays without it

"""Time-varying LQR around a nominal run (agents/lqr.py): Riccati gains against the algebraic Riccati equation, the
chained finite-difference linearisation against the simulator, feedback that holds an inverted pendulum up, the
law that follows the walker, and the periodic law around a limit cycle."""
import dataclasses

import h5py
import mujoco
import numpy as np
import pytest
from scipy.linalg import solve_discrete_are

from agents.config import ConfigError
from agents.lqr import (LinearFeedbackTracker, LQRConfig, follow_walker, get_state, linearise, riccati, riccati_gains,
                        state_difference, STATE_SPEC)
from envs.mocap.tracking import heading


def pole_xml(pivot: str, tip: str, damping: float, gain: float, extra: str = "") -> str:
    """A pole on a hinge about y at ``pivot``, reaching to ``tip`` (relative), driven by a motor with a first-order
    filter (one activation), and ``extra`` bodies."""
    return f"""
<mujoco>
  <option timestep="0.005"/>
  <worldbody>
    <body name="pole" pos="{pivot}">
      <joint name="hinge" type="hinge" axis="0 1 0" damping="{damping}"/>
      <geom type="capsule" fromto="0 0 0 {tip}" size="0.04" mass="1"/>
    </body>
    {extra}
  </worldbody>
  <actuator><general joint="hinge" dyntype="filter" dynprm="0.02" gainprm="{gain}" ctrlrange="-1 1" ctrllimited="true"/></actuator>
</mujoco>
"""


# a pole standing on its hinge (upright is unstable) and a free body falling beside it, so the state has a
# quaternion, velocities and an actuator activation
PENDULUM = pole_xml("0 0 0", "0 0 1", 0.05, 20,
                    '<body name="box" pos="2 0 1"><freejoint/><geom type="box" size="0.1 0.1 0.1" mass="0.5"/></body>')


@pytest.fixture(scope="module")
def model():
    return mujoco.MjModel.from_xml_string(PENDULUM)


def test_long_horizon_gains_match_the_algebraic_riccati_solution():
    rng = np.random.default_rng(0)
    A = np.array([[1.0, 0.1], [0.3, 1.05]])   # unstable
    B = np.array([[0.0], [0.1]])
    Q, R = np.diag([2.0, 0.5]), np.array([[0.3]])
    gains = riccati_gains(np.repeat(A[None], 300, 0), np.repeat(B[None], 300, 0), Q, R)
    P = solve_discrete_are(A, B, Q, R)
    expected = -np.linalg.solve(R + B.T @ P @ B, B.T @ P @ A)
    assert np.allclose(gains[0], expected, atol=1e-8)
    assert not np.allclose(gains[-1], expected, atol=1e-3)   # near the horizon's end the gains are not stationary
    x = rng.standard_normal(2)
    for t in range(250):   # the closed loop under the time-varying gains settles
        x = (A + B @ gains[t]) @ x
    assert np.abs(x).max() < 1e-6


def test_linearisation_predicts_a_control_step_of_the_simulator(model):
    data = mujoco.MjData(model)
    data.qpos[0] = 0.3
    data.qvel[0] = -0.2
    mujoco.mj_forward(model, data)
    state, control, substeps = get_state(model, data), np.array([0.4]), 6
    A, B = linearise(model, state[None], control[None], substeps)

    def step(start, u):
        mujoco.mj_setState(model, data, start, STATE_SPEC)
        data.ctrl[:] = u
        for _ in range(substeps):
            mujoco.mj_step(model, data)
        return get_state(model, data)

    after = step(state, control)
    rng = np.random.default_rng(1)
    n = 2 * model.nv + model.na
    for _ in range(3):
        dx, du = 1e-4 * rng.standard_normal(n), 1e-3 * rng.standard_normal(1)
        perturbed = state.copy()
        qpos = perturbed[1:1 + model.nq]
        mujoco.mj_integratePos(model, qpos, dx[:model.nv], 1.0)
        perturbed[1 + model.nq:1 + model.nq + model.nv + model.na] += dx[model.nv:]
        assert np.allclose(state_difference(model, state, perturbed), dx, atol=1e-9)
        predicted = A[0] @ dx + B[0] @ du
        actual = state_difference(model, after, step(perturbed, control + du))
        assert np.allclose(actual, predicted, atol=1e-3 * np.abs(predicted).max())


def test_feedback_holds_the_pole_up_where_the_nominal_commands_let_it_fall(model):
    data = mujoco.MjData(model)
    mujoco.mj_forward(model, data)
    substeps, steps = 6, 150
    # the nominal: the pole balanced upright with zero command (the box falls; nothing acts on it)
    states, commands = [get_state(model, data)], np.zeros((steps, 1))
    for _ in range(steps):
        for _ in range(substeps):
            mujoco.mj_step(model, data)
        states.append(get_state(model, data))
    tracker = LinearFeedbackTracker(model, np.array(states), commands, substeps, LQRConfig(control_weight=0.1))
    assert tracker.gains.shape == (steps, 1, 2 * model.nv + model.na)

    def final_angle(feedback: bool) -> float:
        mujoco.mj_setState(model, data, states[0], STATE_SPEC)
        data.qpos[0] = 0.05   # a small push
        for t in range(steps):
            state = get_state(model, data)
            data.ctrl[:] = tracker.command(t, state) if feedback else commands[t]
            for _ in range(substeps):
                mujoco.mj_step(model, data)
        return abs(float(data.qpos[0]))

    assert final_angle(feedback=False) > 1.0
    assert final_angle(feedback=True) < 0.02
    np.testing.assert_allclose(tracker.command(10, states[10]), commands[10])   # on the nominal: its command
    with pytest.raises(ConfigError, match="not finite"):
        LinearFeedbackTracker(model, np.full((3, len(states[0])), np.nan), commands[:2], substeps)
    with pytest.raises(ConfigError, match="weights"):
        LQRConfig(control_weight=0.0).validate()


# a walker in miniature: a free root (its first joint) carrying a leg on a hinge, the leg driven by a filtered motor
WALKER = """
<mujoco>
  <option timestep="0.005"/>
  <worldbody>
    <geom type="plane" size="5 5 0.1"/>
    <body name="root" pos="0 0 1"><freejoint/><geom type="box" size="0.2 0.1 0.1" mass="2"/>
      <body name="leg" pos="0.1 0 -0.1">
        <joint name="hip" type="hinge" axis="0 1 0" damping="0.1"/>
        <geom type="capsule" fromto="0 0 0 0 0 -0.6" size="0.04" mass="0.5"/>
      </body>
    </body>
  </worldbody>
  <actuator><general joint="hip" dyntype="filter" dynprm="0.03" gainprm="10" ctrlrange="-1 1" ctrllimited="true"/></actuator>
</mujoco>
"""


def turned(model, state: np.ndarray, angle: float, shift) -> np.ndarray:
    """``state`` with the root turned by ``angle`` about the vertical through it and moved by ``shift`` (x, y)."""
    out, q, v = state.copy(), 1, 1 + model.nq
    half = np.array([np.cos(angle / 2), 0.0, 0.0, np.sin(angle / 2)])
    mujoco.mju_mulQuat(out[q + 3:q + 7], half, state[q + 3:q + 7].copy())
    out[q:q + 2] += shift
    c, s = np.cos(angle), np.sin(angle)
    out[v:v + 2] = [c * state[v] - s * state[v + 1], s * state[v] + c * state[v + 1]]
    return out


def test_a_law_that_follows_the_walker_ignores_its_drift_in_position_and_heading():
    """follow_walker: a state that is the nominal's turned about the vertical and moved on the ground gets the
    nominal's command, and a joint error gets the same feedback wherever the walker stands and faces; the plain law
    steers back towards the nominal's path."""
    model = mujoco.MjModel.from_xml_string(WALKER)
    data = mujoco.MjData(model)
    data.qvel[:3] = [0.8, 0.3, 0.0]   # moving across the ground and tilted a little, so the turn moves every part
    data.qpos[3:7] = [np.cos(0.1), np.sin(0.1), 0.0, 0.0]
    states, commands = [get_state(model, data)], np.full((8, 1), 0.2)
    for command in commands:
        data.ctrl[:] = command
        for _ in range(6):
            mujoco.mj_step(model, data)
        states.append(get_state(model, data))
    cheap = LQRConfig(control_weight=0.01)   # commands cheap against errors: feedback strong enough to see
    plain = LinearFeedbackTracker(model, np.asarray(states), commands, 6, cheap)
    following = LinearFeedbackTracker(model, np.asarray(states), commands, 6,
                                      LQRConfig(control_weight=0.01, follow_walker=True))
    t, nominal = 3, states[3]
    moved = turned(model, nominal, 0.7, [1.5, -0.4])
    assert heading(moved[4:8]) == pytest.approx(heading(nominal[4:8]) + 0.7)
    np.testing.assert_allclose(following.command(t, moved), commands[t], atol=1e-9)
    assert abs(plain.command(t, moved)[0] - commands[t][0]) > 1e-3   # the plain law feeds the drift back
    bent = nominal.copy()
    bent[1 + 7] += 0.2   # the hip 0.2 rad off
    np.testing.assert_allclose(following.command(t, turned(model, bent, -1.1, [0.3, 2.0])), plain.command(t, bent),
                               atol=1e-9)
    assert abs(plain.command(t, bent)[0] - commands[t][0]) > 1e-3
    # steer: the followed nominal is turned that much further than the walker, as if the walker were turned back
    steered = follow_walker(model, nominal, moved, steer=0.3)
    assert heading(steered[4:8]) == pytest.approx(heading(moved[4:8]) + 0.3)
    np.testing.assert_allclose(steered, turned(model, nominal, 1.0, [1.5, -0.4]), atol=1e-9)
    np.testing.assert_allclose(follow_walker(model, nominal, moved, steer=0.0), follow_walker(model, nominal, moved))


# a damped pendulum hanging from its hinge, swung by the motor: driven with a period, it settles into a cycle
SWING = pole_xml("0 0 2", "0 0 -1", 0.3, 6)


class SwingEnv:
    """The pendulum as a tracking-like env: control steps of ``substeps`` physics steps, truncated after ``steps``,
    terminated when the swing passes ``limit`` rad (its "fall")."""

    def __init__(self, steps: int, substeps: int = 6, limit: float = 1.2):
        model = mujoco.MjModel.from_xml_string(SWING)
        self.data, self.steps, self.substeps, self.limit = mujoco.MjData(model), steps, substeps, limit
        self.physics = type("Physics", (), {"model": type("M", (), {"ptr": model}),
                                            "data": type("D", (), {"ptr": self.data})})
        self.time_step = 0

    def reset(self, seed=None):
        mujoco.mj_resetData(self.physics.model.ptr, self.data)
        mujoco.mj_forward(self.physics.model.ptr, self.data)
        self.time_step = 0
        return None, {}

    def step(self, action):
        self.data.ctrl[:] = action
        for _ in range(self.substeps):
            mujoco.mj_step(self.physics.model.ptr, self.data)
        self.time_step += 1
        terminated = abs(self.data.qpos[0]) > self.limit
        return None, 0.0, terminated, self.time_step >= self.steps and not terminated, {}


def test_a_periodic_law_around_a_limit_cycle_repeats_its_stride_where_the_nominal_did_not(tmp_path):
    """find_limit_cycle: the nominal run (a swing driven with period 20 steps, its commands jittered as a planner's
    are) differs from stride to stride; the law it finds acts on the phase, finishes the episode, and the run it
    walks repeats its stride far more closely than the nominal did. PeriodicFeedbackTracker acts as the lead-in
    law before its takeover and gives the stride's command on the stride's state."""
    from agents.lqr import (PeriodicFeedbackTracker, closed_loop, cycle_plan_steps, find_limit_cycle, joint_rms,
                            near_cycle_steps)

    period, steps = 20, 160
    env = SwingEnv(steps)
    model = env.physics.model.ptr
    rng = np.random.default_rng(0)
    drive = 0.5 * np.sin(2 * np.pi * np.arange(steps) / period) + 0.15 * rng.standard_normal(steps)
    replay = type("Replay", (), {"command": staticmethod(lambda t, state: drive[t])})
    states, commands, fell = closed_loop(env, replay)
    assert not fell and len(commands) == steps
    settled = range(80, steps - period, period)   # strides well after the start and any takeover
    nominal_spread = max(joint_rms(model, states[k], states[k + period]) for k in settled)
    config = LQRConfig(cycle_starts=2, cycle_iterations=3, cycle_trials=3, cycle_noise=0.05)
    lead_in = LinearFeedbackTracker(model, states, commands, env.substeps, config)
    law, report = find_limit_cycle(env, lead_in, period, 10, env.substeps)
    chosen = [r for r in report if r.get("chosen")]
    assert len(chosen) == 1 and not chosen[0]["noise_free_fell"] and len(chosen[0]["noisy_steps"]) == 3
    assert {r["start"] for r in report} <= set(range(10, 10 + 2 * period)) and len({r["start"] for r in report}) == 2
    for r in report:   # each candidate also takes over early, where the nominal is nearest its stride
        assert r["takeover"] == r["start"] or 10 <= r["takeover"] <= r["start"] - 1
    assert any(r["takeover"] < r["start"] for r in report)
    run, _, fell = closed_loop(env, law)
    assert not fell
    spread = max(joint_rms(model, run[k], run[k + period]) for k in settled)
    assert spread < 0.2 * nominal_spread, (spread, nominal_spread)
    # before the takeover the lead-in law acts; on the stride's own state the stride's command, at any stride
    probe = run[5] + 0.01
    np.testing.assert_allclose(law.command(law.takeover - 1, probe), lead_in.command(law.takeover - 1, probe))
    for t in (law.start + 3, law.start + 3 + 4 * period):
        np.testing.assert_allclose(law.command(t, law.states[3]), np.clip(law.commands[3], -1, 1))
    # the search reads the nominal only through cycle_plan_steps: a run stopped there gives the same starts and a
    # law that finishes too (what a looped walk's collection plans: about a third of a 10 s walk)
    short = cycle_plan_steps(period, 10)
    short_states, short_commands, fell = closed_loop(env, replay, steps=short)
    assert len(short_commands) == short == 70 and not fell
    np.testing.assert_array_equal(short_states, states[:short + 1])
    short_law, short_report = find_limit_cycle(
        env, LinearFeedbackTracker(model, short_states, short_commands, env.substeps, config), period, 10,
        env.substeps)
    assert [r["start"] for r in short_report] == [r["start"] for r in report] and not closed_loop(env, short_law)[2]
    # the law found is stored with the data and rebuilt from it without a search, only under the same settings
    stored = tmp_path / "law.h5"
    with h5py.File(stored, "w") as f:
        for key, value in law.saved().items():
            f[key] = value
    with h5py.File(stored, "r") as f:
        saved = {key: f[key][()] for key in f}
    again = PeriodicFeedbackTracker.restored(lead_in, saved, env.substeps)
    assert (again.start, again.takeover, again.period) == (law.start, law.takeover, law.period)
    for t in (law.takeover - 1, law.start + 5, law.start + 5 + 3 * period):
        state = run[min(t, len(run) - 1)]
        np.testing.assert_allclose(again.command(t, state), law.command(t, state))
    other = LinearFeedbackTracker(model, states, commands, env.substeps, dataclasses.replace(config, cycle_takeovers=1))
    assert PeriodicFeedbackTracker.restored(other, saved, env.substeps) is None
    assert PeriodicFeedbackTracker.restored(lead_in, {"commands": commands}, env.substeps) is None
    near = near_cycle_steps(law, states, 10, 3)
    distance = [joint_rms(model, states[t], law.states[(t - law.start) % period]) for t in range(10, law.start)]
    assert near and near[0] == 10 + int(np.argmin(distance)) and all(abs(a - b) >= 4 for a in near for b in near
                                                                      if a != b)
    late, early = law.taking_over_at(law.start), law.taking_over_at(10)
    assert early.phase(10) == (10 - law.start) % period and early.gains is law.gains and late.phase(10) is None
    with pytest.raises(ConfigError, match="no stride of"):
        find_limit_cycle(env, lead_in, steps, 10, env.substeps)
    with pytest.raises(ConfigError, match="cycle_starts"):
        LQRConfig(cycle_starts=0).validate()
    with pytest.raises(ConfigError, match="cycle_takeovers"):
        LQRConfig(cycle_takeovers=-1).validate()
    with pytest.raises(ValueError, match="one more state"):
        PeriodicFeedbackTracker(lead_in, 0, states[:3], commands[:3], env.substeps)


def test_the_command_hessian_is_what_a_command_off_the_law_costs_to_the_end():
    """H_t of ``riccati``: a command off the law's by du at step t, the law acting from t + 1 on, costs exactly
    du' H_t du more over the rest of the horizon (a linear system, a quadratic cost)."""
    rng = np.random.default_rng(1)
    T, n, m = 12, 3, 2
    A, B = rng.standard_normal((T, n, n)) * 0.5 + np.eye(n), rng.standard_normal((T, n, m)) * 0.3
    Q, R = np.diag([1.0, 2.0, 0.5]), np.diag([0.3, 0.7])
    gains, hessians = riccati(A, B, Q, R)
    assert np.allclose(gains, riccati_gains(A, B, Q, R))

    def cost_to_go(t: int, x: np.ndarray, du: np.ndarray) -> float:
        total = 0.0
        for s in range(t, T):
            u = gains[s] @ x + (du if s == t else 0.0)
            total += x @ Q @ x + u @ R @ u
            x = A[s] @ x + B[s] @ u
        return total + x @ Q @ x   # the terminal cost

    for t in (0, 5, T - 1):
        x, du = rng.standard_normal(n), rng.standard_normal(m)
        assert cost_to_go(t, x, du) - cost_to_go(t, x, 0 * du) == pytest.approx(du @ hessians[t] @ du, rel=1e-9)
        assert np.all(np.linalg.eigvalsh(hessians[t] - R) > -1e-12)   # R plus what the state's cost adds

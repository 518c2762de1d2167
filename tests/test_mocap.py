"""Motion capture (envs/mocap): AMC -> walker conversion (joint mapping by name, floor height, HDF5 schema),
snippet cutting, mirroring, and the tracking env -- kinematic playback of the reference scores the maximum
CoMic reward, doing nothing falls and terminates."""
from pathlib import Path

import h5py
import numpy as np
import pytest
from dm_control.locomotion.mocap import loader

import envs
from envs import EnvError
from envs.mocap import bvh, convert, tracking

WALK = "07_01"          # CMU subject 7 walk, 2.63 s
TURN = "01_01"          # forward jumps and a turn around, 22.9 s


@pytest.fixture(scope="module")
def converter():
    return convert.Converter()


@pytest.fixture(scope="module")
def walk(converter):
    return converter.walker_qpos(convert.SOURCE_DIR / f"{WALK}.amc")


def test_conversion_shapes_joint_mapping_and_ranges(converter, walk):
    qpos, _ = walk
    cmu_qpos, cmu_names = convert.amc_to_cmu_qpos(convert.SOURCE_DIR / f"{WALK}.amc")
    assert qpos.shape == (88, 7 + 56) == (len(cmu_qpos), cmu_qpos.shape[1])   # 2.63 s at 0.03 s
    np.testing.assert_allclose(np.linalg.norm(qpos[:, 3:7], axis=1), 1.0, atol=1e-9)
    names = converter.kinematics.joint_names
    for name in ("lfemurrz", "rtibiarx", "lowerbackry", "headrx", "rhumerusrz"):
        expected = cmu_qpos[:, 7 + cmu_names.index(name)]
        low, high = converter.kinematics.joint_range[names.index(name)]
        np.testing.assert_allclose(qpos[:, 7 + names.index(name)], np.clip(expected, low, high))
    # the mapping follows names, not positions
    shuffled = list(np.random.default_rng(0).permutation(cmu_names))
    mapped = convert.map_joints(cmu_qpos[:, 7:], cmu_names, shuffled)
    np.testing.assert_array_equal(mapped[:, shuffled.index("ltoesrx")], cmu_qpos[:, 7 + cmu_names.index("ltoesrx")])
    with pytest.raises(convert.ConversionError, match="nofemur"):
        convert.map_joints(cmu_qpos[:, 7:], cmu_names, ["nofemur"])
    assert 1.18 < converter.body_scale < 1.25   # dm_control scales the 2020 walker by 1.2


def test_floor_correction_puts_feet_on_the_floor(converter, walk):
    qpos, plane = walk
    distances = converter.foot_distances(qpos)
    assert abs(np.percentile(distances, convert.FLOOR_PERCENTILE)) < 1e-6
    assert distances.min() > -0.03 and np.median(distances) < 0.04   # a walk: a foot on the floor most frames
    thirds = np.array_split(distances, 3)                            # and all along the walk: no drift
    assert abs(np.median(thirds[0]) - np.median(thirds[-1])) < 0.02
    assert 1.0 < np.median(qpos[:, 2]) < 1.3                         # root (pelvis) height of the 1.2x walker
    # the raw conversion was off the floor: the walk's capture floor is tilted by about 2 cm per metre
    raw = qpos.copy()
    raw[:, 2] += plane[0] + (qpos[:, :2] - qpos[0, :2]) @ plane[1:]
    np.testing.assert_allclose(converter.floor_plane(raw), plane, atol=1e-9)
    assert np.abs(plane[1:]).max() > 0.01
    raw_distances = converter.foot_distances(raw)
    assert abs(np.median(np.array_split(raw_distances, 3)[0]) - np.median(np.array_split(raw_distances, 3)[-1])) > 0.03


def test_airborne_fraction_tells_a_walk_on_the_floor_from_one_in_the_air(converter, walk):
    qpos, _ = walk
    assert converter.airborne_fraction(qpos) < 0.05                  # a foot near the floor on every frame
    # 08_07 (walk, exaggerated stride): after the floor fit, no foot within 8 cm on three frames in four
    exaggerated, _ = converter.walker_qpos(convert.SOURCE_DIR / "08_07.amc")
    assert converter.airborne_fraction(exaggerated) > 0.5
    # lifting the whole walk by the clearance puts every frame in the air
    lifted = qpos.copy()
    lifted[:, 2] += convert.AIRBORNE_CLEARANCE + 0.05
    assert converter.airborne_fraction(lifted) == 1.0


def test_stance_slip_reads_a_planted_foot_as_still_and_a_stretched_walk_as_sliding(converter, walk):
    qpos, _ = walk
    kinematics, dt = converter.kinematics, converter.timestep
    slip = kinematics.stance_slip(qpos, dt)
    assert len(slip) > 20                          # a walk stands on one foot much of the time
    assert abs(np.median(slip)) < 0.05             # subject 7's walk: stance feet planted (root speed 1.6 m/s)
    # root translation stretched by 20 % about the start: the stance foot slides forward at ~0.2 x root speed
    stretched = qpos.copy()
    stretched[:, :2] = qpos[0, :2] + 1.2 * (qpos[:, :2] - qpos[0, :2])
    speed = np.median(np.linalg.norm(np.diff(qpos[:, :2], axis=0), axis=1)) / dt
    assert 0.15 * speed < np.median(kinematics.stance_slip(stretched, dt)) - np.median(slip) < 0.25 * speed
    # a pose held still has no direction of travel: no frames
    assert len(kinematics.stance_slip(np.repeat(qpos[:1], 5, axis=0), dt)) == 0


def test_cut_snippets():
    assert convert.cut_snippets(36) == [(0, 36)]                 # a 1.1 s run stays whole
    pieces = convert.cut_snippets(764)                           # 22.9 s -> 4 pieces of 5.7 s
    assert len(pieces) == 4 and pieces[0][0] == 0 and pieces[-1][1] == 764
    assert all(a[1] == b[0] for a, b in zip(pieces, pieces[1:]))
    assert all(2.0 <= (end - start) * convert.CONTROL_TIMESTEP <= 6.0 for start, end in pieces)
    with pytest.raises(convert.ConversionError):
        convert.cut_snippets(1)


def test_mirroring(converter, walk):
    kinematics = converter.kinematics
    qpos, _ = walk
    mirrored = convert.mirror_qpos(qpos, kinematics)
    np.testing.assert_allclose(convert.mirror_qpos(mirrored, kinematics), qpos, atol=1e-12)
    assert np.abs(mirrored[:, 7:] - qpos[:, 7:]).max() > 0.3
    # body by body: the mirror image of the left thigh is where the right thigh goes, and so on
    bodies = [b.name for b in kinematics.walker.mocap_tracking_bodies]
    partner = [bodies.index(convert._partner(name, bodies)) for name in bodies]
    kinematics.set_state(qpos[40])
    original = kinematics.features()["body_positions"]
    kinematics.set_state(mirrored[40])
    image = kinematics.features()["body_positions"][partner]
    # the mirror plane: vertical, through the first root position, normal to the root's first left-right axis
    plane_point = np.array([*qpos[0, :2], 0.0])
    left_right = convert._rotation(qpos[0, 3:7])[:, np.diag(kinematics.body_mirror) < 0].ravel()
    n = np.array([*left_right[:2], 0.0]) / np.linalg.norm(left_right[:2])
    reflected = plane_point + (original - plane_point) @ (np.eye(3) - 2 * np.outer(n, n)).T
    assert np.abs(image - reflected).max() < 0.01
    # turning: the second 01_01 snippet turns around one way, its mirror image the other way
    turn, _ = converter.walker_qpos(convert.SOURCE_DIR / f"{TURN}.amc")
    start, end = convert.cut_snippets(len(turn))[1]
    heading = convert.heading_change(turn[start:end], kinematics)
    assert abs(heading) > 2.5
    assert convert.heading_change(convert.mirror_qpos(turn[start:end], kinematics), kinematics) == \
        pytest.approx(-heading, abs=1e-6)


def test_curving_bends_the_path_and_keeps_the_pose(converter, walk):
    kinematics = converter.kinematics
    qpos, _ = walk
    rate = np.radians(30.0)
    bent = convert.curve_qpos(qpos, rate)
    seconds = (len(qpos) - 1) * convert.CONTROL_TIMESTEP
    assert convert.heading_change(bent, kinematics) - convert.heading_change(qpos, kinematics) == \
        pytest.approx(rate * seconds, abs=1e-6)
    np.testing.assert_array_equal(bent[:, 7:], qpos[:, 7:])
    np.testing.assert_array_equal(bent[:, 2], qpos[:, 2])
    np.testing.assert_allclose(bent[0], qpos[0])
    # the same distance along the path, but the path is an arc: the straight walk's end is 4.3 m away, the arc's nearer
    steps = lambda q: np.linalg.norm(np.diff(q[:, :2], axis=0), axis=1)  # noqa: E731
    np.testing.assert_allclose(steps(bent), steps(qpos), atol=1e-12)
    assert np.linalg.norm(bent[-1, :2] - bent[0, :2]) < np.linalg.norm(qpos[-1, :2] - qpos[0, :2]) - 0.2
    # left and right are mirror images in heading; a zero rate changes nothing
    right = convert.curve_qpos(qpos, -rate)
    assert convert.heading_change(right, kinematics) - convert.heading_change(qpos, kinematics) == \
        pytest.approx(-rate * seconds, abs=1e-6)
    np.testing.assert_allclose(convert.curve_qpos(qpos, 0.0), qpos, atol=1e-12)
    # each step of the root, seen from the root's own frame, is the clip's: the body walks the same, the world turns
    for t in (0, 30, 60):
        step, bent_step = qpos[t + 1, :3] - qpos[t, :3], bent[t + 1, :3] - bent[t, :3]
        np.testing.assert_allclose(convert._rotation(bent[t, 3:7]).T @ bent_step,
                                   convert._rotation(qpos[t, 3:7]).T @ step, atol=1e-12)


def test_curving_for_a_while_bends_only_inside_the_window(converter, walk):
    kinematics = converter.kinematics
    qpos, _ = walk
    rate, dt, window = np.radians(30.0), convert.CONTROL_TIMESTEP, (0.6, 1.5)
    bent = convert.curve_qpos(qpos, rate, window=window)
    before, inside = round(window[0] / dt), round(window[1] / dt)
    # straight (the clip itself) up to the window, turning at the rate in it, the reached turn held after it
    np.testing.assert_allclose(bent[:before + 1], qpos[:before + 1], atol=1e-12)
    turned = lambda a, b: convert.heading_change(bent[a:b + 1], kinematics) - \
        convert.heading_change(qpos[a:b + 1], kinematics)  # noqa: E731
    assert turned(before, inside) == pytest.approx(rate * (inside - before) * dt, abs=1e-6)
    assert turned(inside, len(qpos) - 1) == pytest.approx(0.0, abs=1e-6)
    assert turned(0, len(qpos) - 1) == pytest.approx(rate * (window[1] - window[0]), abs=1e-6)
    np.testing.assert_array_equal(bent[:, 7:], qpos[:, 7:])
    # the whole clip as the window is the constant arc
    np.testing.assert_allclose(convert.curve_qpos(qpos, rate, window=(0.0, len(qpos) * dt)),
                               convert.curve_qpos(qpos, rate), atol=1e-12)
    assert convert.curve_suffix(15, (3, 7)) == ("-left15from3to7", "-right15from3to7")
    assert convert.is_curved("07_01-0-loop10-right15from3to7") and not convert.is_curved("07_01-0-loop10")


def test_turning_by_steps_keeps_the_stance_feet_planted(converter, walk):
    kinematics, dt = converter.kinematics, convert.CONTROL_TIMESTEP
    qpos, _ = walk
    rate = np.radians(45.0)
    seconds = (len(qpos) - 1) * dt
    np.testing.assert_allclose(convert.step_turn_qpos(qpos, 0.0, kinematics), qpos, atol=1e-9)   # rate 0: the clip
    stepped, pivoted = convert.step_turn_qpos(qpos, rate, kinematics), convert.curve_qpos(qpos, rate)
    # the heading turns as the pivoted arc's does, and so does the path: the travel over the last 0.6 s points
    # about rate x (time between) further left than over the first
    np.testing.assert_allclose(stepped[:, 3:7], pivoted[:, 3:7], atol=1e-12)
    direction = lambda q, frames: np.arctan2(*(q[frames[-1], :2] - q[frames[0], :2])[::-1])  # noqa: E731
    early, late = (0, 20), (len(qpos) - 21, len(qpos) - 1)
    expected = rate * (late[0] - early[0]) * dt + direction(qpos, late) - direction(qpos, early)
    assert direction(stepped, late) - direction(stepped, early) == pytest.approx(expected, abs=np.radians(10))
    # the stance foot twists and slides as in the clip, where the pivoted arc twists it at about the rate
    clip_twist = np.median(kinematics.stance_twist(qpos, dt))
    assert np.median(kinematics.stance_twist(stepped, dt)) < clip_twist + np.radians(3)
    assert np.median(kinematics.stance_twist(pivoted, dt)) > clip_twist + 0.6 * rate
    stance = kinematics.stance_sides(qpos)
    assert 4 <= np.count_nonzero(np.diff(stance)) <= 6   # 2.6 s of walking: about five steps
    def stance_speed(q):
        ankles = kinematics.ankles_xy(q)
        return np.median([np.linalg.norm(ankles[t + 1, stance[t]] - ankles[t - 1, stance[t]]) / (2 * dt)
                          for t in range(1, len(q) - 1) if stance[t - 1] == stance[t] == stance[t + 1]])
    assert stance_speed(stepped) == pytest.approx(stance_speed(qpos), abs=0.01)
    # the hips' axial joints take the turn up, a fraction of the turn over a step either way; the rest is the clip's
    hips = [kinematics.joint_names.index(name) for name in convert.HIP_AXIAL_JOINTS]
    others = np.setdiff1d(np.arange(len(kinematics.joint_names)), hips)
    np.testing.assert_array_equal(stepped[:, 7 + others], qpos[:, 7 + others])
    offset = stepped[:, 7 + np.array(hips)] - qpos[:, 7 + np.array(hips)]
    assert np.radians(5) < np.abs(offset).max() < rate * 0.6
    # right is the mirror image in heading
    right = convert.step_turn_qpos(qpos, -rate, kinematics)
    assert convert.heading_change(right, kinematics) - convert.heading_change(qpos, kinematics) == \
        pytest.approx(-rate * seconds, abs=1e-6)
    assert convert.curve_suffix(45, style="stepped") == ("-stepleft45", "-stepright45")
    assert convert.is_curved("07_01-0-loop10-stepright45from3to5") and convert.is_augmented("07_01-0-stepleft45")


def test_stepped_curves_from_the_command_line_each_rate_bending_the_clip(tmp_path):
    out = tmp_path / "stepped.h5"
    assert convert.main(["--clips", WALK, "--curve", "15", "30", "--curve-style", "stepped", "--output", str(out)]) == 0
    with h5py.File(out) as f:
        assert sorted(f) == sorted([f"{WALK}-0", *(f"{WALK}-0-step{side}{rate}" for side in ("left", "right")
                                                    for rate in (15, 30))])
    with pytest.raises(convert.ConversionError, match="curve-style"):
        convert.convert_clips(convert.SOURCE_DIR, tmp_path / "x.h5", [WALK], curves=(30.0,), curve_style="twisted")


def periodic_walk(frames, period=30, speed=1.2, yaw_rate=0.2, dt=convert.CONTROL_TIMESTEP):
    """A made-up walker qpos that repeats exactly every ``period`` frames, up to a turn and a move: joints swing,
    the root bobs and pitches, and it walks along an arc at ``yaw_rate`` rad/s."""
    t = np.arange(frames)
    phase = 2 * np.pi * t / period
    heading = yaw_rate * dt * t
    qpos = np.zeros((frames, 7 + 56))
    qpos[:, 0] = np.cumsum(speed * dt * np.cos(heading)) - speed * dt
    qpos[:, 1] = np.cumsum(speed * dt * np.sin(heading))
    qpos[:, 2] = 1.15 + 0.02 * np.sin(2 * phase)
    pitch = 0.05 * np.sin(phase)
    for i in range(frames):   # heading about z, then pitch about the body's y
        about_z = np.array([np.cos(heading[i] / 2), 0, 0, np.sin(heading[i] / 2)])
        about_y = np.array([np.cos(pitch[i] / 2), 0, np.sin(pitch[i] / 2), 0])
        convert.mujoco.mju_mulQuat(qpos[i, 3:7], about_z, about_y)
    qpos[:, 7:] = 0.3 * np.sin(phase[:, None] + np.linspace(0, np.pi, 56)[None])
    return qpos


def test_looping_repeats_a_stride_seamlessly(converter, walk):
    # an exactly periodic walk: the stride found is its period, and looping 80 frames to 200 gives the walk's own
    # 200 frames -- the copies are carried on by the stride's turn and travel, not just pasted
    full = periodic_walk(200)
    start, end, mismatch = convert.find_stride(full[:80])
    assert (end - start) % 30 == 0 and mismatch < 1e-9
    looped = convert.loop_qpos(full[:80], start, end, 200)
    assert looped.shape == full.shape
    np.testing.assert_allclose(looped, full, atol=1e-9)
    # a real walk: the stride is two steps (1.08 s), and the seams are no rougher than the clip itself
    qpos, _ = walk
    start, end, mismatch = convert.find_stride(qpos)
    assert 0.9 <= (end - start) * convert.CONTROL_TIMESTEP <= 1.3 and mismatch < 0.06
    looped = convert.loop_qpos(qpos, start, end, 334)
    assert len(looped) == 334
    np.testing.assert_array_equal(looped[:start], qpos[:start])
    jerk = lambda q: np.abs(np.diff(q[:, 7:], axis=0)).max()  # noqa: E731  (largest joint change per frame)
    assert jerk(looped) <= jerk(qpos) + 1e-9
    steps = np.linalg.norm(np.diff(looped[:, :2], axis=0), axis=1)
    assert steps.max() <= np.linalg.norm(np.diff(qpos[:, :2], axis=0), axis=1).max() + 1e-9
    assert qpos[:, 2].min() - 0.01 <= looped[:, 2].min() and looped[:, 2].max() <= qpos[:, 2].max() + 0.01
    assert np.linalg.norm(looped[-1, :2] - looped[0, :2]) > 3 * np.linalg.norm(qpos[-1, :2] - qpos[0, :2])
    with pytest.raises(convert.ConversionError, match="stride"):
        convert.loop_qpos(qpos, 50, 40, 334)
    with pytest.raises(convert.ConversionError, match="too short"):
        convert.find_stride(qpos[:10])


def test_looped_snippets_are_named_but_left_out_of_the_default_sets(tmp_path):
    out = tmp_path / "looped.h5"
    assert convert.main(["--clips", WALK, "09_06", "--mirror", "--loop", "6", "--loop-clips", WALK,
                         "--curve", "30", "--curve-clips", WALK, "--curve-window", "2", "4", "--output", str(out)]) == 0
    captured = [f"{WALK}-0", f"{WALK}-0-mirror", "09_06-0", "09_06-0-mirror"]
    # bent for a while: only the loop lasts past the window's end (the clip itself lasts 2.6 s)
    made_up = [f"{WALK}-0-loop6", f"{WALK}-0-mirror-loop6", f"{WALK}-0-left30", f"{WALK}-0-right30",
               f"{WALK}-0-loop6-left30", f"{WALK}-0-loop6-right30", f"{WALK}-0-loop6-left30from2to4",
               f"{WALK}-0-loop6-right30from2to4"]
    assert tracking.snippet_ids(out) == sorted(captured)
    assert tracking.snippet_ids(out, augmented=True) == sorted(captured + made_up)
    assert all(convert.is_looped(s) == ("loop" in s) and convert.is_augmented(s) for s in made_up)
    assert tracking.snippet_frames(made_up[0], out) == 201   # 6 s at 0.03 s, both ends
    # the data is consistent over the whole loop, seams included
    rewards, terminated, _ = playback_rewards([made_up[1]], ref_path=out, seed=1, clip_start=True)
    assert not terminated and len(rewards) > 190
    np.testing.assert_allclose(rewards, tracking.MAX_COMIC_REWARD, atol=1e-4)
    with h5py.File(out) as f:
        columns = f.attrs["snippet_source_columns"].split()
        rows = {r.split()[0]: r.split() for r in f.attrs["snippet_source"].astype(str)}
    assert columns[-2:] == ["loop_stride_start", "loop_stride_end"]
    assert rows["09_06-0"][-2:] == ["-1", "-1"] and int(rows[made_up[0]][-1]) > int(rows[made_up[0]][-2]) >= 0
    for kwargs, message in ((dict(loop_clips=[WALK]), "needs --loop"), (dict(loop_seconds=-3.0), "positive"),
                            (dict(loop_seconds=2.0), "not longer"),
                            (dict(loop_seconds=6.0, loop_clips=["08_01"]), "not among")):
        with pytest.raises(convert.ConversionError, match=message):
            convert.convert_clips(convert.SOURCE_DIR, tmp_path / "x.h5", [WALK], **kwargs)


def test_curved_snippets_are_named_but_left_out_of_the_default_sets(tmp_path):
    out = tmp_path / "curved.h5"
    assert convert.main(["--clips", WALK, "09_06", "--curve", "30", "--curve-clips", WALK, "--output", str(out)]) == 0
    curved = [f"{WALK}-0-left30", f"{WALK}-0-right30"]
    assert tracking.snippet_ids(out) == [f"{WALK}-0", "09_06-0"]
    assert tracking.snippet_ids(out, augmented=True) == sorted([f"{WALK}-0", "09_06-0", *curved])
    rewards, terminated, _ = playback_rewards([curved[1]], ref_path=out, seed=1)   # the data is consistent
    assert not terminated
    np.testing.assert_allclose(rewards, tracking.MAX_COMIC_REWARD, atol=1e-4)
    # a curved snippet is an env of its own; the multi-clip task and the mocap starts draw from the others only
    assert envs.make(f"humanoid-track:{curved[0]}", ref_path=out).clips == [curved[0]]
    assert sorted(envs.make("humanoid-track", ref_path=out).clips) == [f"{WALK}-0", "09_06-0"]
    with h5py.File(out) as f:
        straight = sum(int(f[i].attrs["num_steps"]) for i in (f"{WALK}-0", "09_06-0"))
    assert tracking.MocapStarts(out).count == straight
    # the shipped file: the 68 snippets as captured and mirrored, and the 14 walks bent both ways at 30 deg/s
    assert len(tracking.snippet_ids()) == 68 and not any(convert.is_curved(s) for s in tracking.snippet_ids())
    assert len(tracking.snippet_ids(augmented=True)) == 68 + 28
    with pytest.raises(convert.ConversionError, match="positive"):
        convert.convert_clips(convert.SOURCE_DIR, tmp_path / "x.h5", [WALK], curves=(-10.0,))
    with pytest.raises(convert.ConversionError, match="not among"):
        convert.convert_clips(convert.SOURCE_DIR, tmp_path / "x.h5", [WALK], curves=(30.0,), curve_clips=["08_01"])
    with pytest.raises(convert.ConversionError, match="needs --curve"):
        convert.convert_clips(convert.SOURCE_DIR, tmp_path / "x.h5", [WALK], curve_clips=[WALK])
    with pytest.raises(convert.ConversionError, match="plain decimals"):   # 1e-05 would not read as an arc's id
        convert.convert_clips(convert.SOURCE_DIR, tmp_path / "x.h5", [WALK], curves=(1e-5,))
    for window, message in (((2.0, 1.0), "START < END"), ((1e-5, 1.0), "plain decimals")):
        with pytest.raises(convert.ConversionError, match=message):
            convert.convert_clips(convert.SOURCE_DIR, tmp_path / "x.h5", [WALK], curves=(30.0,), curve_window=window)
    with pytest.raises(convert.ConversionError, match="needs --curve"):
        convert.convert_clips(convert.SOURCE_DIR, tmp_path / "x.h5", [WALK], curve_window=(1.0, 2.0))
    # the shipped arcs are what the CLI writes
    with h5py.File(out) as f, h5py.File(convert.DEFAULT_OUTPUT) as shipped:
        for field in ("position", "quaternion", "joints", "body_positions"):
            np.testing.assert_array_equal(f[f"{curved[0]}/walkers/walker_0/{field}"][()],
                                          shipped[f"{curved[0]}/walkers/walker_0/{field}"][()])


def test_hdf5_schema_and_regeneration(tmp_path):
    out = tmp_path / "mocap.h5"
    assert convert.main(["--clips", WALK, "--mirror", "--output", str(out)]) == 0
    ids = [f"{WALK}-0", f"{WALK}-0-mirror"]
    trajectories = loader.HDF5TrajectoryLoader(str(out))
    assert sorted(trajectories.keys()) == sorted(ids)
    reference = trajectories.get_trajectory(ids[0]).as_dict()
    sizes = {"position": (3,), "quaternion": (4,), "joints": (56,), "center_of_mass": (3,),
             "end_effectors": (4, 3), "velocity": (3,), "angular_velocity": (3,), "joints_velocity": (56,),
             "appendages": (5, 3), "body_positions": (31, 3), "body_quaternions": (31, 4)}
    assert {k: v.shape for k, v in reference.items()} == {f"walker/{k}": (88, *s) for k, s in sizes.items()}
    with h5py.File(out) as f, h5py.File(convert.DEFAULT_OUTPUT) as shipped:
        assert f[ids[0]].attrs["dt"] == convert.CONTROL_TIMESTEP
        assert f[f"{ids[0]}/walkers/walker_0/joints"].dtype == np.float32
        for field in sizes:   # the shipped file is what the CLI writes
            np.testing.assert_array_equal(f[f"{ids[0]}/walkers/walker_0/{field}"][()],
                                          shipped[f"{ids[0]}/walkers/walker_0/{field}"][()])
    # the velocities are the finite differences of the positions
    np.testing.assert_allclose(reference["walker/velocity"][1:-1],
                               (reference["walker/position"][2:] - reference["walker/position"][:-2]) / 0.06,
                               atol=1e-4)


def playback_rewards(clips, ref_path=convert.DEFAULT_OUTPUT, seed=0, **options):
    env = tracking.TrackingEnv(clips, ref_path=ref_path, seed=seed, playback=True, **options)
    env.reset()
    rewards, terminated, truncated = [], False, False
    while not (terminated or truncated):
        _, reward, terminated, truncated, info = env.step(env.action_space.sample())
        rewards.append(reward)
    return np.array(rewards), terminated, info


def test_reference_playback_scores_the_maximum_reward(tmp_path):
    rewards, terminated, info = playback_rewards([f"{WALK}-0"])
    assert not terminated and info["clip"] == f"{WALK}-0" and len(rewards) >= tracking.MIN_STEPS
    np.testing.assert_allclose(rewards, tracking.MAX_COMIC_REWARD, atol=1e-4)
    # the mirrored data is as consistent
    out = tmp_path / "mirror.h5"
    convert.main(["--clips", "09_06", "--mirror", "--output", str(out)])
    rewards, terminated, _ = playback_rewards(["09_06-0-mirror"], ref_path=out, seed=3)
    assert not terminated
    np.testing.assert_allclose(rewards, tracking.MAX_COMIC_REWARD, atol=1e-4)


def test_env_names_groups_and_early_termination():
    names = tracking.names()
    assert "humanoid-track" in envs.names() and f"humanoid-track:{WALK}-0" in names
    env = envs.make(f"humanoid-track:{WALK}-0", seed=0)
    obs, info = env.reset()
    assert set(obs) == {"proprio", "task"} and env.observation_space.contains(obs)
    assert env.action_space.shape == (56,) and info["clip"] == f"{WALK}-0"
    rewards, terminated = [], False
    for _ in range(30):   # a limp humanoid (all position targets at mid-range) falls away from the reference
        obs, reward, terminated, truncated, info = env.step(np.zeros(56))
        rewards.append(reward)
        if terminated or truncated:
            break
    assert terminated and 0 <= min(rewards) and max(rewards) < tracking.MAX_COMIC_REWARD
    assert env.render().shape == (240, 320, 3)
    # all snippets; the clip keyword picks some
    env = envs.make("humanoid-track", seed=1, clip=["09_01-0", "16_35-0"])
    assert {env.reset()[1]["clip"] for _ in range(6)} <= {"09_01-0", "16_35-0"}


def test_fall_ending_lets_a_walker_off_the_reference_path_go_on_until_its_head_drops():
    """ending="fall": the tracking error no longer ends an episode; the head below the fall line does, and the
    reward is dm_control's either way."""
    steps, heads, rewards = {}, {}, {}
    for ending in ("tracking", "fall"):
        env = envs.make(f"humanoid-track:{WALK}-0", seed=0, clip_start=True, ending=ending)
        env.reset(seed=0)
        heads[ending], rewards[ending], terminated = [], [], False
        while not terminated:   # a limp humanoid: it strays from the reference, then falls
            _, reward, terminated, truncated, _ = env.step(np.zeros(56))
            heads[ending].append(float(env.physics.bind(env.walker.head).xpos[2]))
            rewards[ending].append(reward)
            assert not truncated
        steps[ending] = len(heads[ending])
    assert steps["tracking"] < steps["fall"]
    assert heads["tracking"][-1] > 1.0   # ended upright, off the reference's path
    assert heads["fall"][-1] < 0.95 <= min(heads["fall"][:-1])
    assert rewards["fall"][:steps["tracking"]] == pytest.approx(rewards["tracking"])
    with pytest.raises(EnvError, match="ending must be one of"):
        envs.make(f"humanoid-track:{WALK}-0", ending="never")


def test_bad_names_and_options():
    with pytest.raises(EnvError, match="unknown snippet"):  # the family claims the name and names the snippets
        envs.make("humanoid-track:99_99-0")
    with pytest.raises(EnvError, match="unknown snippet"):
        tracking.make("humanoid-track:99_99-0")
    with pytest.raises(EnvError, match="unknown snippet"):
        envs.make("humanoid-track", clip="nope")
    with pytest.raises(EnvError, match="already names"):
        envs.make(f"humanoid-track:{WALK}-0", clip=f"{WALK}-0")
    with pytest.raises(EnvError, match="unknown option"):
        envs.make("humanoid-track", speed=3)
    with pytest.raises(EnvError, match="no mocap data"):
        envs.make("humanoid-track", ref_path="/nonexistent.h5")


def test_time_indexed_and_residual_expert_tasks():
    timed = envs.make(f"humanoid-track-time:{WALK}-0", seed=0, clip_start=True)
    obs, info = timed.reset()
    assert obs["task"].shape == (1,) and obs["task"][0] == 0.0 and info["time_step"] == 0
    assert obs["proprio"].shape == envs.make(f"humanoid-track:{WALK}-0", seed=0).reset()[0]["proprio"].shape

    env = envs.make(f"humanoid-track-residual:{WALK}-0", seed=0, clip_start=True)
    assert env.residual_scale == tracking.RESIDUAL_SCALE
    env.reset()
    with h5py.File(convert.DEFAULT_OUTPUT, "r") as f:
        angles = f[f"{WALK}-0"]["walkers/walker_0/joints"][()][:, 1]   # the next frame, mocap joint order
    walker = env._env.task._walker
    joints = [a.joint for a in walker.actuators]
    low, high = env.physics.bind(joints).range.T
    order = [[j.name for j in walker.mocap_joints].index(j.name) for j in joints]
    np.testing.assert_allclose(env.reference_action(), np.clip(2 * (angles[order] - low) / (high - low) - 1, -1, 1),
                               atol=1e-6)
    action = np.linspace(-1, 1, 56).astype(np.float32)
    np.testing.assert_allclose(env.compose(action),
                               np.clip(env.reference_action() + tracking.RESIDUAL_SCALE * action, -1, 1))
    _, _, _, _, info = env.step(action)
    np.testing.assert_allclose(info["applied_action"], np.clip(
        env._reference_actions[f"{WALK}-0"][1] + tracking.RESIDUAL_SCALE * action, -1, 1))
    # the feed-forward controller alone (zero correction) tracks far longer than a limp walker
    steps, terminated = 0, False
    env.reset()
    while not terminated and steps < 200:
        _, _, terminated, truncated, _ = env.step(np.zeros(56))
        steps += 1
        terminated = terminated or truncated
    assert steps >= 20
    with pytest.raises(EnvError, match="residual_scale"):
        envs.make(f"humanoid-track-residual:{WALK}-0", residual_scale=5.0)


BVH_HEAD = Path(__file__).parent / "data" / "07_01_first_frames.bvh"   # 07_01 in the CMU BVH release: its hierarchy,
#                                                     the release's T-pose frame and the clip's first three frames


def amc_frames(text: str, count: int) -> list[list[float]]:
    """The first ``count`` frames of AMC text as parse_amc reads them: each frame's values in line order."""
    frames, current = [], None
    for line in text.splitlines():
        words = line.split()
        if len(words) == 1 and words[0].isdigit():
            current = []
            frames.append(current)
        elif current is not None and words:
            current.extend(float(w) for w in words[1:])
    return frames[:count]


def test_bvh_release_converts_back_to_the_clips_amc():
    """07_01 exists in both forms: the BVH frames converted back give the AMC's values, bone by bone in the AMC's
    order, to the BVH's 4 decimals (its T-pose frame dropped); a clip bent about an axis its dofs lack is refused."""
    amc, residual = bvh.bvh_to_amc(BVH_HEAD)
    assert residual < 1e-3
    converted = amc_frames(amc, 4)
    original = amc_frames((convert.SOURCE_DIR / f"{WALK}.amc").read_text(), 3)
    assert len(converted) == 3
    np.testing.assert_allclose(converted, original, atol=2e-3)
    assert [line.split()[0] for line in amc.splitlines()[3:32]] == list(bvh.AMC_BONE_ORDER)


def test_bvh_bad_input_is_one_error(tmp_path, capsys):
    text = BVH_HEAD.read_text()
    cases = {
        "rate.bvh": text.replace("Frame Time: .0083333", "Frame Time: .0333333"),
        "short.bvh": text.replace("Frames: 4", "Frames: 5"),
        "knee.bvh": text.replace("0.0000 -0.0000 -0.0000 -0.0990", "0.0000 30.0000 -0.0000 -0.0990", 1),  # a knee
        #                                                                  turned about its own long axis
    }
    expected = {"rate.bvh": "120 Hz", "short.bvh": "header promises 5 frames", "knee.bvh": "dofs do not have"}
    for name, body in cases.items():
        path = tmp_path / name
        path.write_text(body)
        with pytest.raises(SystemExit) as exit_info:
            bvh.main([str(path), "--out-dir", str(tmp_path / "out")])
        assert exit_info.value.code == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error:") and expected[name] in err[0], err
    assert not (tmp_path / "out").exists()      # nothing written when an input is bad
    assert bvh.main([str(BVH_HEAD), "--out-dir", str(tmp_path / "out")]) == 0
    assert (tmp_path / "out" / "07_01_first_frames.amc").read_text() == bvh.bvh_to_amc(BVH_HEAD)[0]


def test_shipped_walking_turn_converts_from_bvh_and_turns_left(converter, tmp_path):
    """16_27 ("walk, 90-degree left turn") is shipped as BVH: the converter reads it like an AMC clip, and the walker's
    reference turns left by about 90 degrees in its 2 s (its mirror, right)."""
    source = convert.REPO / "data" / "mocap" / "bvh"
    assert convert.clip_path(source, "16_27").suffix == ".bvh"
    qpos, _ = converter.walker_qpos(convert.clip_path(source, "16_27"))
    assert len(qpos) == 68                                        # 243 frames at 120 Hz, resampled to 0.03 s
    turn = np.degrees(convert.heading_change(qpos, converter.kinematics))
    assert 80 < turn < 95, turn
    mirrored = convert.mirror_qpos(qpos, converter.kinematics)
    np.testing.assert_allclose(np.degrees(convert.heading_change(mirrored, converter.kinematics)), -turn, atol=1.0)
    with pytest.raises(convert.ConversionError, match="no .amc or .bvh clips"):
        convert.convert_clips(tmp_path, tmp_path / "out.h5")

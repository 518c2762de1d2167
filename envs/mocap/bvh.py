"""CMU clips from the BVH release -> the AMC text that ``envs.mocap.convert`` reads (dm_control's ``parse_amc``).

Why: the CMU clips this project holds as AMC (``data/mocap/cmu``) walk and run straight; none turns while walking.
The CMU database has walking turns (e.g. 16_27 "walk, 90-degree left turn", 69_26 "walk forward 90 degree left turn"),
but the copies within reach are the BVH release made by B. Hahne with ``amc2bvh`` (MotionBuilder joint names, a
T-pose added as frame 0, the other frames untouched). This module inverts that conversion exactly.

``amc2bvh`` writes each bone's local rotation L = C M C^-1, where M is the AMC rotation (the bone's dofs ``rx ry rz``
composed as Rz Ry Rx) and C the bone's ``axis`` rotation from the ASF skeleton (composed the same way); BVH stores L
as Z, Y, X rotation channels (L = Rz Ry Rx). So M = C^-1 L C, read back as the bone's dofs. The root's six channels
are the AMC root's (tx ty tz rx ry rz) unchanged. Checked against 07_01, which exists in both forms: the AMC
values come back to the BVH's 4 decimals (tests/test_mocap.py).

The ASF axes and dofs are those of the CMU skeleton template (``data/mocap/bvh/07.asf``; subjects 01, 07 and 09 have
the same axes and dofs). A bone whose dofs cannot express M (a knee bent about a second axis) means the BVH came
from another skeleton: the largest such leftover angle is reported, and above ``MAX_RESIDUAL_DEG`` the conversion
stops with an error.

    python -m envs.mocap.bvh data/mocap/bvh/16_27.bvh data/mocap/bvh/69_26.bvh --out-dir /tmp/amc
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from scipy.spatial.transform import Rotation

TEMPLATE_ASF = Path(__file__).resolve().parents[2] / "data" / "mocap" / "bvh" / "07.asf"
BVH_FRAME_TIME = 1.0 / 120.0      # parse_amc assumes 120 Hz frames
MAX_RESIDUAL_DEG = 1.0            # amc2bvh output of the template skeleton comes back within rounding (~1e-3)

# BVH (MotionBuilder) joint name -> CMU ASF bone name, from the release's READMEFIRST renaming template.
BVH_TO_ASF = {
    "Hips": "root", "LHipJoint": "lhipjoint", "LeftUpLeg": "lfemur", "LeftLeg": "ltibia", "LeftFoot": "lfoot",
    "LeftToeBase": "ltoes", "RHipJoint": "rhipjoint", "RightUpLeg": "rfemur", "RightLeg": "rtibia",
    "RightFoot": "rfoot", "RightToeBase": "rtoes", "LowerBack": "lowerback", "Spine": "upperback",
    "Spine1": "thorax", "Neck": "lowerneck", "Neck1": "upperneck", "Head": "head", "LeftShoulder": "lclavicle",
    "LeftArm": "lhumerus", "LeftForeArm": "lradius", "LeftHand": "lwrist", "LeftFingerBase": "lhand",
    "LeftHandIndex1": "lfingers", "LThumb": "lthumb", "RightShoulder": "rclavicle", "RightArm": "rhumerus",
    "RightForeArm": "rradius", "RightHand": "rwrist", "RightFingerBase": "rhand", "RightHandIndex1": "rfingers",
    "RThumb": "rthumb",
}
# parse_amc reads a frame's values by position, not by bone name: the CMU AMC files' bone order.
AMC_BONE_ORDER = ("root", "lowerback", "upperback", "thorax", "lowerneck", "upperneck", "head", "rclavicle",
                  "rhumerus", "rradius", "rwrist", "rhand", "rfingers", "rthumb", "lclavicle", "lhumerus", "lradius",
                  "lwrist", "lhand", "lfingers", "lthumb", "rfemur", "rtibia", "rfoot", "rtoes", "lfemur", "ltibia",
                  "lfoot", "ltoes")
ROOT_CHANNELS = ("Xposition", "Yposition", "Zposition", "Xrotation", "Yrotation", "Zrotation")
DOF_INDEX = {"rx": 0, "ry": 1, "rz": 2}


class BVHError(ValueError):
    """A BVH file this converter cannot read (not the CMU release's skeleton, truncated, wrong frame rate)."""


def read_asf_bones(path: Path) -> dict[str, tuple[np.ndarray, tuple[str, ...]]]:
    """Each ASF bone's ``axis`` (degrees, x y z) and ``dof`` names."""
    bones, current = {}, None
    for raw in Path(path).read_text().splitlines():
        words = raw.split()
        if not words:
            continue
        if words[0] == "begin":
            current = {"axis": np.zeros(3), "dof": ()}
        elif words[0] == "end" and current is not None:
            if "name" in current:
                bones[current["name"]] = (current["axis"], current["dof"])
            current = None
        elif current is not None and words[0] == "name":
            current["name"] = words[1]
        elif current is not None and words[0] == "axis":
            if words[4:] and words[4].upper() != "XYZ":
                raise BVHError(f"{path}: bone {current.get('name')} has axis order {words[4]}, only XYZ is supported")
            current["axis"] = np.array([float(w) for w in words[1:4]])
        elif current is not None and words[0] == "dof":
            current["dof"] = tuple(w.lower() for w in words[1:])
    return bones


def read_bvh(path: Path) -> tuple[list[tuple[str, list[str]]], np.ndarray, float]:
    """The joints in channel order with their channel names, the motion (frames, channels) and the frame time."""
    text = Path(path).read_text()
    head, sep, motion = text.partition("MOTION")
    if not sep:
        raise BVHError(f"{path}: no MOTION section (not a BVH file?)")
    joints, name = [], None
    for line in head.splitlines():
        words = line.split()
        if words[:1] in (["ROOT"], ["JOINT"]):
            name = words[1]
        elif words[:1] == ["CHANNELS"]:
            joints.append((name, words[2:2 + int(words[1])]))
    lines = motion.strip().splitlines()
    try:
        frames = int(lines[0].split(":")[1])
        frame_time = float(lines[1].split(":")[1])
        values = np.array([[float(v) for v in line.split()] for line in lines[2:]])
    except (IndexError, ValueError) as e:
        raise BVHError(f"{path}: unreadable MOTION section ({e})") from None
    channels = sum(len(c) for _, c in joints)
    if values.shape != (frames, channels):
        raise BVHError(f"{path}: MOTION has {values.shape[0]} lines of {values.shape[1] if values.ndim == 2 else '?'} "
                       f"values, the header promises {frames} frames of {channels} channels")
    return joints, values, frame_time


def bvh_to_amc(bvh_path: Path, asf_path: Path = TEMPLATE_ASF) -> tuple[str, float]:
    """The BVH clip as AMC text (the T-pose frame 0 dropped), and the largest angle (degrees) a bone's dofs could not
    hold. Raises ``BVHError`` for another skeleton, another frame rate or a residual above ``MAX_RESIDUAL_DEG``."""
    bones = read_asf_bones(asf_path)
    joints, values, frame_time = read_bvh(bvh_path)
    if abs(frame_time - BVH_FRAME_TIME) > 1e-6:
        raise BVHError(f"{bvh_path}: frame time {frame_time:g} s, parse_amc needs 120 Hz ({BVH_FRAME_TIME:.7f} s)")
    unknown = [name for name, _ in joints if name not in BVH_TO_ASF]
    if unknown:
        raise BVHError(f"{bvh_path}: joints {', '.join(unknown)} are not the CMU release's (is it another skeleton?)")
    values = values[1:]                            # frame 0 is the release's added T-pose
    columns, start = {}, 0
    for name, channels in joints:
        columns[BVH_TO_ASF[name]] = (start, channels)
        start += len(channels)
    missing = [bone for bone in AMC_BONE_ORDER if bone not in columns or (bone != "root" and bone not in bones)]
    if missing:
        raise BVHError(f"{bvh_path}: no channels or no ASF bone for {', '.join(missing)} (is it another skeleton?)")
    dofs, residual = {}, 0.0
    for bone in AMC_BONE_ORDER:
        first, channels = columns[bone]
        block = values[:, first:first + len(channels)]
        if bone == "root":
            if sorted(channels) != sorted(ROOT_CHANNELS):
                raise BVHError(f"{bvh_path}: root channels {channels}, expected {ROOT_CHANNELS}")
            dofs[bone] = np.stack([block[:, channels.index(c)] for c in ROOT_CHANNELS], axis=1)
            dofs[bone][:, 3:] = np.rad2deg(np.unwrap(np.deg2rad(dofs[bone][:, 3:]), axis=0))
            continue
        axis, bone_dofs = bones[bone]
        order = "".join(c[0] for c in channels)   # e.g. "ZYX": L = Rz Ry Rx, intrinsic
        local = Rotation.from_euler(order, block, degrees=True)
        c = Rotation.from_euler("xyz", axis, degrees=True)
        angles = (c.inv() * local * c).as_euler("xyz", degrees=True)   # M = Rz(rz) Ry(ry) Rx(rx)
        angles = np.rad2deg(np.unwrap(np.deg2rad(angles), axis=0))
        kept = [DOF_INDEX[d] for d in bone_dofs]
        dropped = [i for i in range(3) if i not in kept]
        if dropped:
            leftover = np.abs((angles[:, dropped] + 180.0) % 360.0 - 180.0)
            residual = max(residual, float(leftover.max()))
        dofs[bone] = angles[:, kept]
    if residual > MAX_RESIDUAL_DEG:
        raise BVHError(f"{bvh_path}: a bone turns {residual:.2f} degrees about an axis its ASF dofs do not have "
                       f"(limit {MAX_RESIDUAL_DEG}); is the skeleton {asf_path}'s?")
    out = [":FULLY-SPECIFIED", ":DEGREES"]
    for frame in range(len(values)):
        out.append(str(frame + 1))
        out += [f"{bone} " + " ".join(f"{v:.6g}" for v in dofs[bone][frame]) for bone in AMC_BONE_ORDER]
    return "\n".join(out) + "\n", residual


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m envs.mocap.bvh", description=__doc__.splitlines()[0])
    parser.add_argument("bvh", nargs="+", type=Path, help="BVH files of the CMU release (e.g. data/mocap/bvh/16_27.bvh)")
    parser.add_argument("--out-dir", type=Path, required=True, help="folder for the <clip>.amc files")
    parser.add_argument("--asf", type=Path, default=TEMPLATE_ASF, help="the ASF skeleton whose axes and dofs to use")
    args = parser.parse_args(argv)
    try:
        if not args.asf.is_file():
            raise BVHError(f"no ASF file at {args.asf}")
        converted = []
        for path in args.bvh:
            if not path.is_file():
                raise BVHError(f"no BVH file at {path}")
            converted.append((path, *bvh_to_amc(path, args.asf)))
    except BVHError as e:
        parser.exit(2, f"error: {e}\n")
    args.out_dir.mkdir(parents=True, exist_ok=True)
    for path, amc, residual in converted:      # written only once every input converted
        target = args.out_dir / f"{path.stem}.amc"
        target.write_text(amc)
        print(f"{path} -> {target}: {amc.count(chr(10) + 'root ')} frames, largest angle outside the dofs "
              f"{residual:.4f} deg")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Motion capture (seed 000 Ch. 8): CMU clips converted for dm_control's CMU humanoid (``envs.mocap.convert``) and
the ``humanoid-track`` tracking environments (``envs.mocap.tracking``). See docs/mocap.md.

This package is an ``envs`` family (``names``, ``make``); both load ``tracking`` on first use, so that
``python -m envs.mocap.convert`` does not import the tracking task."""


FAMILIES = ("humanoid-track", "humanoid-track-time", "humanoid-track-residual")  # tracking.FAMILIES, without
#                                                   importing it: claiming a name must not read mocap data


def accepts(name: str) -> bool:
    """``humanoid-track[-time|-residual][:<snippet>]``; an unknown snippet is ``make``'s error to report."""
    return isinstance(name, str) and name.partition(":")[0] in FAMILIES


def names() -> list[str]:
    from envs.mocap import tracking

    return tracking.names()


def make(name: str, seed: int | None = None, action_repeat: int = 1, **kwargs):
    from envs.mocap import tracking

    return tracking.make(name, seed=seed, action_repeat=action_repeat, **kwargs)

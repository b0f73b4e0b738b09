"""Walks of the queue tree without recursion: levels, cycles, the depth limit, and display order.

Every reader of queues (snapshot validation, the fair-share calculator's input, the sources through
validation) checks the tree with :func:`tree_problems`, so a queue chain deeper than :data:`MAX_QUEUE_DEPTH`
is the same clear error in ``snapshot validate``, ``schedule`` and ``fairshare``. Each walk visits every queue
once (linear time), whatever the shape of the tree.
"""

from __future__ import annotations

from typing import Mapping, Optional, Sequence, TypeVar

MAX_QUEUE_DEPTH = 100
"""Levels a queue tree may have (KAI's trees have 2-4: department, project, ...). Deeper trees are refused:
the engine's per-queue structures grow with queues x depth."""

Q = TypeVar("Q")


def levels(parent_of: Mapping[str, Optional[str]]) -> tuple[dict[str, int], list[list[str]]]:
    """``(level of each queue, cycles)``: a top-level queue (no parent, or a parent that does not exist) is
    level 1. Queues on a cycle, or below one, get no level. Each cycle is reported once, as the path from the
    first queue (in ``parent_of`` order) that reaches it: ``[a, b, a]``."""
    level: dict[str, int] = {}
    looped: set[str] = set()
    cycles: list[list[str]] = []
    for start in parent_of:
        path: list[str] = []
        on_path: dict[str, int] = {}
        cur: Optional[str] = start
        while cur is not None and cur in parent_of and cur not in level and cur not in looped and cur not in on_path:
            on_path[cur] = len(path)
            path.append(cur)
            cur = parent_of[cur]
        if cur is not None and cur in on_path:
            cycles.append(path[on_path[cur]:] + [cur])
            looped.update(path)
            continue
        if cur is not None and cur in looped:
            looped.update(path)
            continue
        base = level[cur] if cur is not None and cur in level else 0
        for name in reversed(path):
            base += 1
            level[name] = base
    return level, cycles


def tree_problems(parent_of: Mapping[str, Optional[str]], max_depth: int = MAX_QUEUE_DEPTH) -> list[tuple[str, str]]:
    """``(queue, message)`` for each cycle (at its first queue) and for each queue one level below
    ``max_depth`` (the deeper ones below it are implied)."""
    level, cycles = levels(parent_of)
    out = [(c[0], "cycle in the queue tree: " + " -> ".join(c)) for c in cycles]
    deepest = max(level.values(), default=0)
    for name, lv in level.items():
        if lv == max_depth + 1:
            top = name
            while parent_of.get(top) in level:   # every ancestor of a queue with a level has one
                top = parent_of[top]
            out.append((name, f"queue tree deeper than {max_depth} levels: {name!r} is level {lv} under top-level "
                              f"queue {top!r} (the tree reaches level {deepest}); kaidash reads at most "
                              f"{max_depth} levels"))
    return out


def tree_order(items: Sequence[Q], name_of, parent_of_item) -> list[tuple[int, Q]]:
    """``(depth, item)`` in depth-first order from the top-level items (depth 0), children in input order.
    Items whose parent is missing are not reached (as in the fair-share division)."""
    children: dict[Optional[str], list[Q]] = {}
    for it in items:
        children.setdefault(parent_of_item(it), []).append(it)
    out: list[tuple[int, Q]] = []
    stack: list[tuple[int, Q]] = [(0, it) for it in reversed(children.get(None, []))]
    seen: set[str] = set()
    while stack:
        depth, it = stack.pop()
        name = name_of(it)
        if name in seen:
            continue
        seen.add(name)
        out.append((depth, it))
        stack.extend((depth + 1, c) for c in reversed(children.get(name, [])))
    return out

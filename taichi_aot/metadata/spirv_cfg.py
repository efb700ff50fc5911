"""The structured control flow of a SPIR-V function, as :mod:`.spirv` checks it.

A shader's branches must form structured control flow (the SPIR-V specification's rules for shaders), which
drivers rely on when they turn it back into loops and ifs: a damaged branch or merge target crashes them. The
rules checked here, on the blocks reachable from the function's entry:

* every cycle passes through a back edge (a branch to a block that dominates the branching one): the flow
  is reducible;
* a back edge branches to a loop header (a block with OpLoopMerge), from a block its continue target
  dominates; a loop header whose continue target is reachable is the target of exactly one;
* a header strictly dominates its merge block, and a loop header dominates its continue target, where they
  are reachable;
* a construct (the blocks a header dominates, less those its merge block dominates) is entered only at its
  header: a block after the merge branches back into it only to leave a construct around it (to its merge
  block, continue target or loop header).

(That a block is the merge block of one header at most, and not the continue target of its own loop, is checked
as the merge instructions are read.) A loop that nothing leaves is no error of form: its kernel is refused where
it is looked up (it would run for ever).
"""

from __future__ import annotations

from typing import Any

from .spirv_rules import SpirvError


def check_function(entry: int, succ: dict[int, list[int]], merges: dict[int, tuple[int, int]],
                   switches: set[int]) -> tuple[_Tree, str]:
    """Check one function's control flow: ``succ`` maps each of its blocks (by label) to the blocks it branches
    to, ``merges`` each header to (its merge block, its continue target or 0 for a selection), ``switches`` holds
    the headers whose block ends in OpSwitch. The cost grows with the blocks and branches, and with how far up
    the dominator tree a branch that joins two paths reaches. Returns the function's dominator tree, and why it
    would run for ever once entered (a loop nothing leaves: well formed, so its kernel is refused where it is
    looked up), or "".

    Constructs are found by structural dominance, as SPIR-V defines them: dominance in the flow where each
    header also branches to its merge block and continue target (so a loop's merge block is no part of a
    selection inside the loop, though only the selection's block branches to it)."""
    tree = _tree(entry, succ)
    back_edges: dict[int, int] = {}
    for block in tree.walk:
        for target in succ[block]:
            if tree.position[target] <= tree.position[block]:
                _back_edge(block, target, tree, merges, back_edges)
    headers = {header: merges[header] for header in merges if header in tree.first}
    structural = {block: list(targets) for block, targets in succ.items()}
    for header, (merge, continue_target) in headers.items():
        structural[header] += [x for x in (merge, continue_target) if x in succ]
    shape = _tree(entry, structural)
    never_ends = ""
    for header, (merge, continue_target) in headers.items():
        never_ends = _header(header, merge, continue_target, tree, shape, back_edges, succ) or never_ends
    _constructs(tree, shape, succ, headers, switches)
    return tree, never_ends


def _tree(entry: int, succ: dict[int, list[int]]) -> _Tree:
    order = _reverse_postorder(entry, succ)
    position = {block: i for i, block in enumerate(order)}
    return _Tree(order, _dominators(order, position, succ), position)


def _header(header: int, merge: int, continue_target: int, tree: _Tree, shape: _Tree, back_edges: dict[int, int],
            succ: dict[int, list[int]]) -> str:
    """A header (of a block that can be reached) against its merge block and continue target; why its loop
    never ends, or ""."""
    if merge in tree.first and (merge == header or not shape.dominates(header, merge)):
        raise SpirvError(f"header %{header} does not dominate its merge block %{merge}")
    if continue_target in tree.first and not shape.dominates(header, continue_target):
        raise SpirvError(f"loop header %{header} does not dominate its continue target %{continue_target}")
    if continue_target in tree.first and header not in back_edges:
        raise SpirvError(f"loop header %{header} is the target of no back edge")
    return _ends(header, tree, succ) if continue_target and merge not in tree.first else ""


def _constructs(tree: _Tree, shape: _Tree, succ: dict[int, list[int]], headers: dict[int, tuple[int, int]],
                switches: set[int]) -> None:
    """Each branch enters a construct only at its header and leaves it only for a merge block or continue target
    of the constructs it may (see _entered_at_header and _left_structured); ``shape``: the structural tree."""
    header_of = {merge: header for header, (merge, _) in headers.items() if merge in shape.first}
    roles: dict[int, list[tuple[str, int]]] = {}  # a block -> ("merge" or "continue", of which header)
    for header, (merge, continue_target) in headers.items():
        roles.setdefault(merge, []).append(("merge", header))
        if continue_target:
            roles.setdefault(continue_target, []).append(("continue", header))
    inner = _innermost(shape.walk[0], shape, headers, header_of, switches)
    for block in tree.walk:
        for target in succ[block]:
            if not shape.dominates(block, target):
                _entered_at_header(block, target, shape, headers, header_of)
            _left_structured(block, target, shape, headers, roles, inner)


class _Tree:
    """The dominator tree of a function's reachable blocks, numbered so that a dominance query is two
    comparisons."""

    def __init__(self, order: list[int], idom: dict[int, int], position: dict[int, int]):
        self.idom, self.position = idom, position
        children: dict[int, list[int]] = {block: [] for block in order}
        for block in order[1:]:
            children[idom[block]].append(block)
        self.children = children
        self.first: dict[int, int] = {}  # a block's number in a depth-first walk of the tree
        self.last: dict[int, int] = {}  # the greatest number in its subtree
        self.walk: list[int] = []  # the blocks by their number
        count, stack = 0, [(order[0], False)]
        while stack:
            block, done = stack.pop()
            if done:
                self.last[block] = count - 1
                continue
            self.first[block] = count
            self.walk.append(block)
            count += 1
            stack.append((block, True))
            stack.extend((child, False) for child in children[block])

    def dominates(self, a: int, b: int) -> bool:
        """Whether block ``a`` dominates block ``b`` (both reachable)."""
        return self.first[a] <= self.first[b] <= self.last[a]

    def common(self, a: int, b: int) -> int:
        """The nearest block that dominates both."""
        return _meet(a, b, self.idom, self.position)


def _entered_at_header(block: int, target: int, tree: _Tree, headers: dict[int, tuple[int, int]],
                       header_of: dict[int, int]) -> None:
    """A branch from ``block`` to ``target``, which ``block`` does not dominate, enters no construct (the blocks
    a header dominates, less those its merge block dominates) from a block its merge block dominates, but at
    its header or at an exit of the constructs around it (their merge blocks, continue targets and loop
    headers, where a break or continue goes). The merge block of such a construct lies on the dominator tree's
    path from ``block`` up to (not including) the nearest block dominating both, and its header dominates
    that block."""
    top = tree.common(block, target)
    up = block
    while up != top:
        header = header_of.get(up)
        if header is not None and header != target and tree.dominates(header, top) and \
                target not in _exits(header, tree, headers):
            raise SpirvError(f"%{block}, after the merge block of header %{header}, branches back into its "
                             "construct")
        up = tree.idom[up]


def _ends(header: int, tree: _Tree, succ: dict[int, list[int]]) -> str:
    """A loop whose merge block cannot be reached ends only where a block it dominates returns (or stops) or
    branches to a block it does not dominate (a break or continue of a loop around it): else, once entered, it
    runs for ever (Taichi writes such a loop for ``while True:`` without a break); why, or ""."""
    for block in tree.walk[tree.first[header]:tree.last[header] + 1]:
        if not succ[block] or not all(tree.dominates(header, target) for target in succ[block]):
            return ""
    return (f"the loop of header %{header} never ends: its merge block cannot be reached, and no block in it "
            "returns or leaves it (a kernel that would run for ever: a GPU's driver gives up on it and loses the "
            "device)")


def _innermost(entry: int, tree: _Tree, headers: dict[int, tuple[int, int]], header_of: dict[int, int],
               switches: set[int]) -> dict[int, tuple[int, int, int]]:
    """{block: (the header of the innermost construct holding it, of the innermost loop, of the innermost
    switch)} (0: none), walking the dominator tree down: a construct opens at its header and closes at its merge
    block. The open constructs are a linked stack ((header, loop, switch), the rest), so nesting costs nothing
    per level."""
    inner: dict[int, tuple[int, int, int]] = {}
    stack: list[tuple[int, Any]] = [(entry, None)]
    while stack:
        block, open_ = stack.pop()
        closed = header_of.get(block)
        if closed is not None:
            open_ = _close(open_, closed)
        if block in headers:
            top = open_[0] if open_ else (0, 0, 0)
            open_ = ((block, block if headers[block][1] else top[1], block if block in switches else top[2]), open_)
        inner[block] = open_[0] if open_ else (0, 0, 0)
        stack.extend((child, open_) for child in tree.children[block])
    return inner


def _close(open_: Any, header: int) -> Any:
    """The linked stack of open constructs without ``header``'s (the innermost, where constructs nest)."""
    skipped = []
    node = open_
    while node is not None and node[0][0] != header:
        skipped.append(node[0])
        node = node[1]
    if node is None:
        return open_
    rest = node[1]
    for header_, loop, switch in reversed(skipped):  # constructs opened inside it (damaged nesting) stay open
        top = rest[0] if rest else (0, 0, 0)
        rest = ((header_, loop if loop != header else top[1], switch if switch != header else top[2]), rest)
    return rest


def _left_structured(block: int, target: int, tree: _Tree, headers: dict[int, tuple[int, int]],
                     roles: dict[int, list[tuple[str, int]]], inner: dict[int, tuple[int, int, int]]) -> None:
    """A branch goes to the merge block of the innermost construct holding ``block``, of the innermost loop (a
    break) or switch, to that loop's continue target (a continue), or stays inside the innermost construct: a
    break or continue reaches no further than the innermost loop. Back edges are _back_edge's, and a branch to
    a loop header that is its own continue target enters the loop."""
    header, loop, switch = inner[block]
    if tree.dominates(target, block):
        return  # a back edge (checked by _back_edge) or a branch to the block itself
    for role, of in roles.get(target, ()):
        if role == "continue" and of == target:
            continue
        if of not in ((header, loop, switch) if role == "merge" else (loop,)):
            raise SpirvError(f"%{block} branches to %{target}, the {role} {'block' if role == 'merge' else 'target'} "
                             f"of header %{of}, which is not the innermost construct or loop holding it")
    if header and target not in roles and not _inside(header, target, tree, headers):
        raise SpirvError(f"%{block} leaves the construct of header %{header} for %{target}, which is no merge block "
                         "or continue target")


def _inside(header: int, block: int, tree: _Tree, headers: dict[int, tuple[int, int]]) -> bool:
    """Whether ``block`` is in the construct of ``header``: dominated by it, not by its merge block."""
    merge = headers[header][0]
    return tree.dominates(header, block) and not (merge in tree.first and tree.dominates(merge, block))


def _exits(header: int, tree: _Tree, headers: dict[int, tuple[int, int]]) -> set[int]:
    """Where a break or continue from inside the constructs around ``header``'s may go: their headers, merge
    blocks and continue targets. A construct around it is one whose header strictly dominates it and whose
    merge block does not."""
    out: set[int] = set()
    up = header
    while tree.idom[up] != up:
        up = tree.idom[up]
        if up in headers:
            merge, continue_target = headers[up]
            if merge not in tree.first or not tree.dominates(merge, header):
                out.update((up, merge, continue_target))
    return out


def _back_edge(block: int, header: int, tree: _Tree, merges: dict[int, tuple[int, int]],
               back_edges: dict[int, int]) -> None:
    """A branch from ``block`` to ``header``, which does not come after it: a loop's back edge."""
    if not tree.dominates(header, block):
        raise SpirvError(f"the branch from %{block} to %{header} closes a cycle that enters no loop at its header")
    continue_target = merges.get(header, (0, 0))[1]
    if not continue_target:
        raise SpirvError(f"the branch from %{block} back to %{header} targets no loop header")
    if continue_target not in tree.first or not tree.dominates(continue_target, block):
        raise SpirvError(f"the back edge from %{block} to %{header} leaves from outside its continue construct")
    if back_edges.setdefault(header, block) != block:
        raise SpirvError(f"loop header %{header} is the target of two back edges")


def _reverse_postorder(entry: int, succ: dict[int, list[int]]) -> list[int]:
    """The blocks reachable from ``entry``, in reverse postorder of a depth-first walk."""
    seen, post = {entry}, []
    stack = [(entry, iter(succ[entry]))]
    while stack:
        block, targets = stack[-1]
        for target in targets:
            if target not in seen:
                seen.add(target)
                stack.append((target, iter(succ[target])))
                break
        else:
            stack.pop()
            post.append(block)
    return post[::-1]


def _dominators(order: list[int], position: dict[int, int], succ: dict[int, list[int]]) -> dict[int, int]:
    """Each reachable block's immediate dominator (the entry's: itself), by the iterative data-flow method."""
    preds: dict[int, list[int]] = {block: [] for block in order}
    for block in order:
        for target in succ[block]:
            preds[target].append(block)
    idom = {order[0]: order[0]}
    changed = True
    while changed:
        changed = False
        for block in order[1:]:
            new = 0
            for pred in preds[block]:
                if pred in idom:
                    new = pred if not new else _meet(pred, new, idom, position)
            if idom.get(block) != new:
                idom[block] = new
                changed = True
    return idom


def _meet(a: int, b: int, idom: dict[int, int], position: dict[int, int]) -> int:
    while a != b:
        while position[a] > position[b]:
            a = idom[a]
        while position[b] > position[a]:
            b = idom[b]
    return a


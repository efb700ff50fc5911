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

(That a block is the merge block of one header at most, and no loop's continue target, is checked as the
merge instructions are read.)
"""

from __future__ import annotations

from .spirv_rules import SpirvError


def check_function(entry: int, succ: dict[int, list[int]], merges: dict[int, tuple[int, int]]) -> None:
    """Check one function's control flow: ``succ`` maps each of its blocks (by label) to the blocks it branches
    to, ``merges`` each header to (its merge block, its continue target or 0 for a selection)."""
    order = _reverse_postorder(entry, succ)
    position = {block: i for i, block in enumerate(order)}
    idom = _dominators(order, position, succ)
    back_edges: dict[int, int] = {}
    for block in order:
        for target in succ[block]:
            if position[target] <= position[block]:
                _back_edge(block, target, idom, merges, back_edges)
    children: dict[int, list[int]] = {block: [] for block in order}
    for block in order[1:]:
        children[idom[block]].append(block)
    headers = {header: merges[header] for header in merges if header in position}
    regions = {header: _subtree(header, children) - (_subtree(merge, children) if merge in position else set())
               for header, (merge, _) in headers.items()}
    for header, (merge, continue_target) in headers.items():
        if merge in position and (merge == header or not _dominates(header, merge, idom)):
            raise SpirvError(f"header %{header} does not dominate its merge block %{merge}")
        if continue_target in position and not _dominates(header, continue_target, idom):
            raise SpirvError(f"loop header %{header} does not dominate its continue target %{continue_target}")
        if continue_target in position and header not in back_edges:
            raise SpirvError(f"loop header %{header} is the target of no back edge")
        if merge in position:
            # where a break or continue from inside the constructs around this one may go
            exits = {x for outer, region in regions.items() if outer != header and header in region
                     for x in (outer, *headers[outer])}
            _entered_at_header(header, merge, children, succ, exits)


def _entered_at_header(header: int, merge: int, children: dict[int, list[int]], succ: dict[int, list[int]],
                       exits: set[int]) -> None:
    """No block the merge block dominates branches into the construct, but to its header or to ``exits`` (the
    merge blocks, continue targets and loop headers of the constructs around it, where a break or continue
    goes)."""
    after = _subtree(merge, children)
    inside = _subtree(header, children) - after
    for block in after:
        for target in succ[block]:
            if target in inside and target != header and target not in exits:
                raise SpirvError(f"%{block}, after the merge block of header %{header}, branches back into its "
                                 "construct")


def _subtree(block: int, children: dict[int, list[int]]) -> set[int]:
    """The blocks ``block`` dominates (itself too)."""
    out, stack = {block}, [block]
    while stack:
        for child in children[stack.pop()]:
            out.add(child)
            stack.append(child)
    return out


def _back_edge(block: int, header: int, idom: dict[int, int], merges: dict[int, tuple[int, int]],
               back_edges: dict[int, int]) -> None:
    """A branch from ``block`` to ``header``, which does not come after it: a loop's back edge."""
    if not _dominates(header, block, idom):
        raise SpirvError(f"the branch from %{block} to %{header} closes a cycle that enters no loop at its header")
    continue_target = merges.get(header, (0, 0))[1]
    if not continue_target:
        raise SpirvError(f"the branch from %{block} back to %{header} targets no loop header")
    if not _dominates(continue_target, block, idom):
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


def _dominates(a: int, b: int, idom: dict[int, int]) -> bool:
    """Whether block ``a`` dominates block ``b`` (both reachable)."""
    while b != a:
        up = idom[b]
        if up == b:
            return False
        b = up
    return True

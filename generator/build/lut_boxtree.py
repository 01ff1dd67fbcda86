"""The ``boxtree`` LUT encoding of the generated Verilog (docs/hdl.md): nested comparators on the
quantized input fields, built from the distillation partition by
:func:`mi_certify.generator.core.boxtree.build_tree`."""

from __future__ import annotations

from mi_certify.generator.build.verilog_parts import LutContext, LutLogic, decls
from mi_certify.generator.core.boxtree import Leaf, build_tree, tree_size


def tree_lines(node, fields: list[dict], entry, out: str) -> tuple[list[str], set[str]]:
    """Nested if/else lines (relative indentation) assigning ``out``; ``entry(e)`` formats an
    entry; the fields used."""
    lines: list[str] = []
    used: set[str] = set()

    def walk(nd, ind: str) -> None:
        if isinstance(nd, Leaf):
            lines.append(f"{ind}{out} = {entry(nd.entry)};")
            return
        fld = fields[nd.field]
        used.add(fld["name"])
        lines.append(f"{ind}if (q_{fld['name']} < {fld['bits']}'d{nd.threshold}) begin")
        walk(nd.below, ind + "  ")
        lines.append(f"{ind}end else begin")
        walk(nd.above, ind + "  ")
        lines.append(f"{ind}end")

    walk(node, "")
    return lines, used


def lut_logic(c: LutContext) -> LutLogic:
    """The box tree of ``c``'s table over ``c.boxes`` (or the grid): its if/else lines, its size,
    and a wire per address field it compares."""
    root = build_tree(c.entries, [f["bits"] for f in c.fields], c.boxes)
    comparators, leaves = tree_size(root)
    lines, used = tree_lines(root, c.fields, c.entry, c.lut_out)
    tree_fields = [f for f in c.fields if f["name"] in used]
    rows = [("wire", f["bits"], f"q_{f['name']}") for f in tree_fields]
    field_decls = [ln[:-1] + (f" = {c.lut_addr}[{f['msb']}:{f['lsb']}];" if f["msb"] > f["lsb"] else
                              f" = {c.lut_addr}[{f['msb']}];")
                   for ln, f in zip(decls(rows) if rows else [], tree_fields)]
    note = (f"box tree of {comparators} comparators and {leaves} leaves on the quantized input fields "
            f"(from the {'distillation partition' if c.boxes else 'grid'})")
    return LutLogic(note, c.lut_out, variables={"tree_lines": lines, "tree_comparators": comparators,
                                                "tree_leaves": leaves, "tree_field_decls": field_decls})

"""PNG heatmap of the LUT over two inputs (matplotlib), proven and resolved cells told apart.

The other inputs are fixed at their middle level (``2^(bits-1)``). Colour: the proposed
action; a cross: a resolved cell; a dot: a sampled cell; no mark: proven. The PNG has
no timestamp in its metadata, so the same LUT gives the same file.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from mi_certify.runtime.quantize import address

from mi_certify.generator.core.errors import SpecError
from mi_certify.generator.core.lut import RESOLVED, SAMPLED, Lut
from mi_certify.generator.core.spec import Spec


def write_heatmap(spec: Spec, lut: Lut, x_name: str, y_name: str, path: Path) -> None:
    """Write the heatmap of ``lut`` over inputs ``x_name`` (horizontal) and ``y_name``.

    Raises:
        SpecError if a name is not an input of the spec or both names are the same.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import ListedColormap

    names = [i.name for i in spec.inputs]
    for n in (x_name, y_name):
        if n not in names:
            raise SpecError(f"--heatmap: '{n}' is not an input (inputs: {', '.join(names)})", file=spec.path)
    if x_name == y_name:
        raise SpecError("--heatmap needs two different inputs", file=spec.path)
    xi, yi = names.index(x_name), names.index(y_name)
    bits = [i.bits for i in spec.inputs]
    base = [1 << (b - 1) for b in bits]
    nx, ny = 1 << bits[xi], 1 << bits[yi]
    tok = np.zeros((ny, nx), dtype=int)
    stat = np.empty((ny, nx), dtype=object)
    for qy in range(ny):
        for qx in range(nx):
            lv = list(base)
            lv[xi], lv[yi] = qx, qy
            a = address(lv, bits)
            tok[qy, qx] = int(lut.tokens[a])
            stat[qy, qx] = lut.status[a]
    xs, ys = spec.inputs[xi], spec.inputs[yi]
    fig, ax = plt.subplots(figsize=(7, 5.5), dpi=100)
    cmap = ListedColormap(plt.get_cmap("tab10").colors[: len(spec.actions)])
    ax.imshow(tok, origin="lower", cmap=cmap, vmin=-0.5, vmax=len(spec.actions) - 0.5, aspect="auto",
              extent=(xs.min, xs.max, ys.min, ys.max), interpolation="nearest")
    sx, sy = (xs.max - xs.min) / nx, (ys.max - ys.min) / ny
    for mark, st in (("x", RESOLVED), (".", SAMPLED)):
        qy, qx = np.nonzero(stat == st)
        if qy.size:
            ax.scatter(xs.min + (qx + 0.5) * sx, ys.min + (qy + 0.5) * sy, marker=mark, c="black", s=18,
                       label=f"{st} ({qy.size})")
    handles = [plt.Rectangle((0, 0), 1, 1, color=cmap(i)) for i in range(len(spec.actions))]
    labels = [a.name for a in spec.actions]
    extra, extra_labels = ax.get_legend_handles_labels()
    ax.legend(handles + extra, labels + extra_labels, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    others = ", ".join(f"{i.name} level {b}" for k, (i, b) in enumerate(zip(spec.inputs, base)) if k not in (xi, yi))
    ax.set_title(f"{spec.name}: LUT over {x_name} × {y_name}\n(other inputs: {others})", fontsize=9)
    ax.set_xlabel(f"{x_name} [{xs.unit}]" if xs.unit else x_name)
    ax.set_ylabel(f"{y_name} [{ys.unit}]" if ys.unit else y_name)
    fig.tight_layout()
    fig.savefig(path, metadata={"Software": None})
    plt.close(fig)

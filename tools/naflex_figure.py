"""Draw docs/images/naflex_panorama.png: one panorama's NaFlex patch grid and its padded sequence (docs/naflex.md).

    PYTHONPATH=. .venv/bin/python tools/naflex_figure.py

A synthetic 400 x 2000 panorama (sky, two mountain ridges, a sun: drawn here, no download) is given its grid by the
``"siglip2"`` rule (the same as ``"timm"`` at this size) under 256 patches of 16, resized to it
(``naflex_grid.resize_to_budget``) and cut by ``naflex_grid.patchify``; the figure shows the grid over the resized
image and the 256 positions of the sequence, the image's patches and the padding. The numbers printed are the ones
docs/naflex.md quotes.
"""

import argparse
import os

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SIZE, PATCH, BUDGET = (400, 2000), 16, 256


def panorama(height, width):
    """``(height, width, 3)`` float32 in [0, 255]: a sky gradient, two ridges and a sun."""
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    t = y / height
    image = np.stack([110 + 90 * t, 160 + 60 * t, 235 - 30 * t], -1)
    sun = (x - 0.72 * width) ** 2 + (y - 0.28 * height) ** 2 < (0.07 * height) ** 2
    image[sun] = (255, 214, 90)
    for base, amplitude, colour, phase in ((0.55, 0.12, (95, 110, 130), 0.0), (0.72, 0.08, (60, 95, 70), 1.7)):
        ridge = height * (base - amplitude * (np.sin(x / width * 9 + phase) + 0.5 * np.sin(x / width * 23 + 2 * phase)))
        image[y > ridge] = colour
    return image


def main(argv=None):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from keras_vit.layers import naflex_grid

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(ROOT, "docs", "images", "naflex_panorama.png"))
    args = parser.parse_args(argv)
    image = panorama(*SIZE)
    resized = np.clip(naflex_grid.resize_to_budget(image, PATCH, BUDGET, rule="siglip2"), 0, 255)
    rows, cols = naflex_grid.grid_for(SIZE, PATCH, BUDGET, rule="siglip2")
    assert (rows, cols) == naflex_grid.grid_for(SIZE, PATCH, BUDGET, rule="timm")
    _, coords, valid = naflex_grid.patchify(resized, PATCH, BUDGET)
    n = int(valid.sum())
    print(f"{SIZE[0]} x {SIZE[1]} panorama, budget {BUDGET} patches of {PATCH}: resized to {resized.shape[0]} x "
          f"{resized.shape[1]} pixels, a {rows} x {cols} grid, {n} patches and {BUDGET - n} padding; "
          f"the square model's 16 x 16 grid would squash it {SIZE[1] / SIZE[0]:.0f}:1 into 1:1")

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(11, 4.2), gridspec_kw={"height_ratios": [rows, 2.2]})
    top.imshow(resized.astype(np.uint8), extent=(0, resized.shape[1], resized.shape[0], 0))
    for r in range(rows + 1):
        top.axhline(r * PATCH, color="white", lw=0.6)
    for c in range(cols + 1):
        top.axvline(c * PATCH, color="white", lw=0.6)
    for index in (0, cols - 1, (rows - 1) * cols, n - 1):
        r, c = coords[index]
        top.text(c * PATCH + PATCH / 2, r * PATCH + PATCH / 2, f"{index}\n({r},{c})", ha="center", va="center",
                 fontsize=5.5, color="black", bbox=dict(boxstyle="round,pad=0.1", fc="white", ec="none", alpha=0.8))
    top.set_title(f"{SIZE[0]} x {SIZE[1]} panorama under {BUDGET} patches of {PATCH}: resized to "
                  f"{resized.shape[0]} x {resized.shape[1]}, a {rows} x {cols} grid (token index, (row, col))", fontsize=9)
    top.set_xticks([])
    top.set_yticks([])
    strip = np.where(valid, 1.0, 0.0)[None]
    bottom.imshow(strip, cmap=matplotlib.colors.ListedColormap(["#bbbbbb", "#3b6fb6"]), aspect="auto",
                  extent=(0, BUDGET, 1, 0), vmin=0, vmax=1)
    for k in range(0, BUDGET + 1, cols):
        if k <= n:
            bottom.axvline(k, color="white", lw=0.5)
    bottom.set_yticks([])
    bottom.set_xticks([0, cols, n, BUDGET])
    bottom.tick_params(labelsize=7)
    bottom.set_title(f"the sequence: {n} patches row by row (patch_valid True), {BUDGET - n} padding (False, masked)",
                     fontsize=9)
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print(f"wrote {os.path.relpath(args.out, ROOT)}")


if __name__ == "__main__":
    main()

"""PNG figures of a ViT's attention and position embeddings (matplotlib, no display needed).

- :func:`save_attention_figure` (:func:`attention_figure`): a figure for a report: the image with its
  heatmap blended over it, upsampled to at least :data:`LONG_SIDE` pixels on its long side, a colour
  bar, and a title (``keras-vit attention`` puts the predicted class and its score there);
- :func:`save_heatmap_overlay`: the bare blend, at the image's own size (``keras-vit attention --plain``);
- :func:`plot_position_similarity` (:func:`position_similarity_figure`): Figure 7 (centre) of the paper,
  the cosine similarity of each patch's position embedding with every other's; beyond
  :data:`MAX_PANELS` x :data:`MAX_PANELS` positions, a summary grid of every k-th row and column;
- :func:`plot_attention_distance`: Figure 7 (right), mean attention distance
  per head against depth.

Figures are drawn on ``matplotlib.figure.Figure`` objects with the Agg canvas,
never through ``pyplot``, so they work in scripts and servers without a display.
"""

import os

import numpy as np

from keras_vit.domains import PROBABILITY
from keras_vit.inference import images as images_lib

LONG_SIDE = 480  # pixels: the attention figure's image is upsampled to at least this on its long side
DPI = 100  # of every figure written here: a figure of w x h inches is 100 w x 100 h pixels
MAX_PANELS = 16  # positions per side the similarity figure shows in full; a larger grid gets a summary
SUMMARY_PANELS = 8  # at most this many positions per side in the summary grid


def _require_matplotlib():
    try:
        # deferred: matplotlib is an optional extra ([viz]) and slow to import
        import matplotlib  # noqa: F401
    except ImportError:  # pragma: no cover - matplotlib is in the viz/dev extras
        raise ImportError("Plotting needs matplotlib: pip install 'keras-vit[viz]'") from None


def _figure(figsize):
    _require_matplotlib()
    # deferred: matplotlib, as in _require_matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=figsize)
    FigureCanvasAgg(figure)
    return figure


def _save(figure, path, dpi=DPI):
    path = os.fspath(path)
    directory = os.path.dirname(path)
    if directory:
        os.makedirs(directory, exist_ok=True)
    figure.savefig(path, dpi=dpi, format="png")
    return path


def normalize_map(heatmap):
    """Scale a map to [0, 1]; a constant map becomes all zeros.

    Example:
    >>> normalize_map([[1.0, 3.0], [2.0, 5.0]])
    array([[0.  , 0.5 ],
           [0.25, 1.  ]])
    """
    heatmap = np.asarray(heatmap, dtype="float64")
    low, high = heatmap.min(), heatmap.max()
    if high - low <= 1e-12 * max(abs(high), 1.0):
        return np.zeros_like(heatmap)
    return (heatmap - low) / (high - low)


def overlay_heatmap(image, heatmap, alpha=0.5, cmap="jet"):
    """Blend a colour-mapped heatmap over an RGB image.

    Args:
        image: ``(H, W, 3)`` RGB in [0, 255].
        heatmap: ``(H, W)`` (any range; scaled to [0, 1]); resized bilinearly
            (:func:`keras_vit.inference.images.resize`) if its size differs
            from the image's.
        alpha: heatmap opacity in [0, 1].
        cmap: a matplotlib colormap name.

    Returns:
        uint8 ``(H, W, 3)``.

    Example:
    >>> overlay = overlay_heatmap(np.zeros((4, 4, 3)), np.eye(2), alpha=1.0)  # a 2x2 map over a 4x4 image
    >>> overlay.shape, overlay.dtype
    ((4, 4, 3), dtype('uint8'))
    """
    _require_matplotlib()
    import matplotlib  # deferred: matplotlib, as in _require_matplotlib

    image = np.asarray(image, dtype="float64")
    if image.ndim != 3 or image.shape[-1] != 3:
        raise ValueError(f"Expected an RGB image (H, W, 3). Received: shape={image.shape}")
    alpha = PROBABILITY.check(alpha, "alpha")  # keras_vit.domains; `keras-vit attention --alpha` uses it too
    heatmap = np.asarray(heatmap)
    if heatmap.ndim != 2:
        raise ValueError(f"Expected a heatmap (H, W). Received: shape={heatmap.shape}")
    heatmap = images_lib.resize(heatmap, image.shape[:2])
    colours = matplotlib.colormaps[cmap](normalize_map(heatmap))[..., :3] * 255.0
    blended = (1.0 - alpha) * image + alpha * colours
    return np.clip(np.round(blended), 0, 255).astype("uint8")


def save_heatmap_overlay(image, heatmap, path, alpha=0.5, cmap="jet"):
    """Write :func:`overlay_heatmap` as a PNG of exactly the image's size. Returns the path."""
    _require_matplotlib()
    import matplotlib.image  # deferred: matplotlib, as in _require_matplotlib

    path = os.fspath(path)
    directory = os.path.dirname(path)
    if directory:
        os.makedirs(directory, exist_ok=True)
    matplotlib.image.imsave(path, overlay_heatmap(image, heatmap, alpha, cmap), format="png")
    return path


def display_size(size, long_side=LONG_SIDE):
    """``(h, w)`` scaled up (never down) so that its long side is at least ``long_side``, aspect kept.

    Example:
    >>> display_size((28, 28)), display_size((60, 90)), display_size((600, 512))
    ((480, 480), (320, 480), (600, 512))
    """
    h, w = (int(v) for v in size)
    scale = max(1.0, long_side / max(h, w))
    return max(1, round(h * scale)), max(1, round(w * scale))


def attention_figure(image, heatmap, *, title=None, alpha=0.5, cmap="jet", long_side=LONG_SIDE):
    """A ``matplotlib.figure.Figure`` of ``image`` with ``heatmap`` blended over it, a colour bar and a title.

    The image is resized bilinearly (:func:`keras_vit.inference.images.resize`) so that its long side is
    at least ``long_side`` pixels (a 28x28 digit becomes 480x480; a photo larger than that keeps its
    size), the heatmap to the same size, and drawn one figure pixel per image pixel at :data:`DPI`.
    The colour bar maps the colours to the heatmap scaled to [0, 1] (:func:`normalize_map`).

    Args:
        image: ``(H, W, 3)`` RGB in [0, 255].
        heatmap: ``(h, w)``, any range.
        title: e.g. ``"predicted: cat (0.93)"``; None: no title.
        alpha, cmap: as in :func:`overlay_heatmap`.
        long_side: the least size, in pixels, of the image's long side in the figure.

    Returns:
        The figure (Agg canvas); :func:`save_attention_figure` writes it.
    """
    _require_matplotlib()
    import matplotlib  # deferred: matplotlib, as in _require_matplotlib

    image = np.asarray(image)
    if image.ndim != 3 or image.shape[-1] != 3:
        raise ValueError(f"Expected an RGB image (H, W, 3). Received: shape={image.shape}")
    height, width = display_size(image.shape[:2], long_side)
    shown = images_lib.resize(np.asarray(image, dtype="float32"), (height, width))
    blended = overlay_heatmap(np.clip(shown, 0, 255), images_lib.resize(np.asarray(heatmap, dtype="float32"), (height, width)),
                              alpha, cmap)
    bar, top, margin = 1.3 * DPI, (0.6 if title else 0.15) * DPI, 0.15 * DPI  # pixels beside and above the image
    fig_w, fig_h = width + 2 * margin + bar, height + 2 * margin + top - margin
    figure = _figure((fig_w / DPI, fig_h / DPI))
    axes = figure.add_axes([margin / fig_w, margin / fig_h, width / fig_w, height / fig_h])
    axes.imshow(blended, interpolation="nearest")
    axes.set_xticks([])
    axes.set_yticks([])
    colorbar_axes = figure.add_axes([(2 * margin + width) / fig_w, margin / fig_h, 0.2 * DPI / fig_w, height / fig_h])
    mappable = matplotlib.cm.ScalarMappable(norm=matplotlib.colors.Normalize(0.0, 1.0), cmap=cmap)
    figure.colorbar(mappable, cax=colorbar_axes, label="Attention (scaled to [0, 1])")
    if title:
        axes.set_title(title, fontsize=12)
    return figure


def save_attention_figure(image, heatmap, path, *, title=None, alpha=0.5, cmap="jet", long_side=LONG_SIDE):
    """Write :func:`attention_figure` as a PNG. Returns the path."""
    figure = attention_figure(image, heatmap, title=title, alpha=alpha, cmap=cmap, long_side=long_side)
    return _save(figure, path)


def summary_positions(rows, cols, max_panels=MAX_PANELS, summary_panels=SUMMARY_PANELS):
    """``(row indices, col indices, step)`` of the positions the similarity figure shows.

    Every position up to ``max_panels`` per side; beyond, every ``step``-th row and column, ``step`` the
    least that leaves at most ``summary_panels`` per side.

    Example:
    >>> summary_positions(14, 14)[2], summary_positions(24, 24)
    (1, ([0, 3, 6, 9, 12, 15, 18, 21], [0, 3, 6, 9, 12, 15, 18, 21], 3))
    """
    if max(rows, cols) <= max_panels:
        return list(range(rows)), list(range(cols)), 1
    step = -(-max(rows, cols) // summary_panels)
    return list(range(0, rows, step)), list(range(0, cols, step)), step


def position_similarity_figure(similarity, title="Position embedding similarity", max_panels=MAX_PANELS):
    """Figure 7 (centre) as a ``Figure``: one map per patch position, its cosine similarity with all others.

    A grid of more than ``max_panels`` positions per side (24x24 at 384 pixels, patch 16) would give
    hundreds of unreadable panels: it is summarised by every k-th row and column of positions
    (:func:`summary_positions`), each panel still the full map, and the title says which.

    Args:
        similarity: ``(rows, cols, rows, cols)`` from
            :func:`keras_vit.inspect.attention.position_embedding_similarity`.
        title: the figure's title (the summary's note is added to it).
        max_panels: the most positions per side shown in full.
    """
    similarity = np.asarray(similarity)
    if similarity.ndim != 4:
        raise ValueError(f"Expected similarity of shape (rows, cols, rows, cols). Received: shape={similarity.shape}")
    rows, cols = similarity.shape[:2]
    row_ids, col_ids, step = summary_positions(rows, cols, max_panels)
    if step > 1:
        title = (f"{title}, summary of the {rows}x{cols} grid:\n"
                 f"every {step} positions along each side ({len(row_ids)}x{len(col_ids)} of {rows * cols} panels)")
    n_rows, n_cols = len(row_ids), len(col_ids)
    size = min(12.0, max(3.0, 0.6 * max(n_rows, n_cols)))
    width, height = size * n_cols / max(n_rows, n_cols), size * n_rows / max(n_rows, n_cols)
    top = 0.9 if step == 1 else 1.3
    figure = _figure((width + 1.6, height + top))
    right = width / (width + 1.6)
    labelled = step > 1  # a summary's panels name their position: the row on the left, the column below
    grid = figure.add_gridspec(n_rows, n_cols, wspace=0.05, hspace=0.05, left=0.05 if labelled else 0.02, right=right,
                               bottom=0.25 / (height + top) if labelled else 0.02, top=1 - (top - 0.1) / (height + top))
    image = None
    for a, i in enumerate(row_ids):
        for b, j in enumerate(col_ids):
            axes = figure.add_subplot(grid[a, b])
            image = axes.imshow(similarity[i, j], vmin=-1, vmax=1, cmap="viridis", interpolation="nearest")
            axes.set_xticks([])
            axes.set_yticks([])
            if labelled and b == 0:
                axes.set_ylabel(str(i), fontsize="x-small")
            if labelled and a == n_rows - 1:
                axes.set_xlabel(str(j), fontsize="x-small")
    colorbar_axes = figure.add_axes([right + 0.2 / (width + 1.6), 0.1, 0.2 / (width + 1.6), 0.75])
    figure.colorbar(image, cax=colorbar_axes, label="Cosine similarity")
    figure.suptitle(title)
    return figure


def plot_position_similarity(similarity, path, title="Position embedding similarity"):
    """Write :func:`position_similarity_figure` as a PNG. Returns the path."""
    return _save(position_similarity_figure(similarity, title), path)


def plot_attention_distance(distances, path, title="Mean attention distance"):
    """Figure 7 (right): each head's mean attention distance against its block index.

    Args:
        distances: ``(layers, heads)`` in pixels, from
            :func:`keras_vit.inspect.attention.mean_attention_distance`.
        path: PNG file to write.

    Returns:
        The path.
    """
    distances = np.asarray(distances, dtype="float64")
    if distances.ndim != 2:
        raise ValueError(f"Expected distances of shape (layers, heads). Received: shape={distances.shape}")
    layers, heads = distances.shape
    figure = _figure((6.0, 4.5))
    axes = figure.add_subplot(1, 1, 1)
    for head in range(heads):
        axes.scatter(np.arange(layers), distances[:, head], s=14, label=f"head {head}")
    axes.set_xlabel("Network depth (layer)")
    axes.set_ylabel("Mean attention distance (pixels)")
    axes.set_xticks(np.arange(layers))
    axes.set_ylim(bottom=0)
    axes.set_title(title)
    if heads <= 16:
        axes.legend(fontsize="x-small", ncol=2, loc="lower right")
    figure.tight_layout()
    return _save(figure, path)

"""PNG figures of a ViT's attention and position embeddings (matplotlib, no display needed).

- :func:`save_heatmap_overlay`: an image with a heatmap blended over it, at the image's own size;
- :func:`plot_position_similarity`: Figure 7 (centre) of the paper, the cosine
  similarity of each patch's position embedding with every other's;
- :func:`plot_attention_distance`: Figure 7 (right), mean attention distance
  per head against depth.

Figures are drawn on ``matplotlib.figure.Figure`` objects with the Agg canvas,
never through ``pyplot``, so they work in scripts and servers without a display.
"""

import os

import numpy as np

from keras_vit.domains import PROBABILITY
from keras_vit.inference import images as images_lib


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


def _save(figure, path, dpi=100):
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


def plot_position_similarity(similarity, path, title="Position embedding similarity"):
    """Figure 7 (centre): one small map per patch position, its cosine similarity with all others.

    Args:
        similarity: ``(rows, cols, rows, cols)`` from
            :func:`keras_vit.inspect.attention.position_embedding_similarity`.
        path: PNG file to write.

    Returns:
        The path.
    """
    similarity = np.asarray(similarity)
    if similarity.ndim != 4:
        raise ValueError(f"Expected similarity of shape (rows, cols, rows, cols). Received: shape={similarity.shape}")
    rows, cols = similarity.shape[:2]
    size = min(12.0, max(3.0, 0.6 * max(rows, cols)))
    width, height = size * cols / max(rows, cols), size * rows / max(rows, cols)
    figure = _figure((width + 1.6, height + 0.6))
    right = width / (width + 1.6)
    grid = figure.add_gridspec(rows, cols, wspace=0.05, hspace=0.05, left=0.02, right=right, bottom=0.02, top=0.9)
    image = None
    for i in range(rows):
        for j in range(cols):
            axes = figure.add_subplot(grid[i, j])
            image = axes.imshow(similarity[i, j], vmin=-1, vmax=1, cmap="viridis", interpolation="nearest")
            axes.set_xticks([])
            axes.set_yticks([])
    colorbar_axes = figure.add_axes([right + 0.2 / (width + 1.6), 0.1, 0.2 / (width + 1.6), 0.75])
    figure.colorbar(image, cax=colorbar_axes, label="Cosine similarity")
    figure.suptitle(title)
    return _save(figure, path)


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

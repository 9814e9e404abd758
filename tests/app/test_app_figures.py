"""app.figures: pure data -> plotly Figure, checked cell by cell on planted matrices."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from app import atlas_figure, figures, protein_figures
from probe.views import reading


def _z(trace) -> np.ndarray:
    return np.asarray(trace.z, dtype=float)


def test_downsample_is_block_max_and_leaves_input_alone():
    matrix = np.arange(100, dtype=np.float32).reshape(10, 10)
    before = matrix.copy()
    pooled, factor = figures.downsample(matrix, max_bins=5)
    assert factor == 2 and pooled.shape == (5, 5)
    expected = matrix.reshape(5, 2, 5, 2).max(axis=(1, 3))
    np.testing.assert_array_equal(pooled, expected)
    np.testing.assert_array_equal(matrix, before)


def test_downsample_uneven_blocks_and_nan():
    matrix = np.full((7, 7), np.nan)
    matrix[6, 0] = 0.5  # the only value, in the partial last row block
    pooled, factor = figures.downsample(matrix, max_bins=3)
    assert factor == 3 and pooled.shape == (3, 3)
    assert pooled[2, 0] == 0.5
    assert np.isnan(pooled[0, 0]) and np.isnan(pooled[2, 2])


# The explorer's heatmap is drawn in the browser (assets/explorer.js): its pooling, labels, outlines and
# colour scales are tested there (tests/app/test_app_js.py).


def test_line_view_draws_one_segment_per_strong_weight():
    alpha = np.array([[1.0, 0.0, 0.0], [0.5, 0.5, 0.0], [0.05, 0.15, 0.8]])
    figure = figures.line_view(alpha, ["a", "b", "c"], threshold=0.1)
    segments = sum(trace.x.count(None) for trace in figure.data if trace.mode == "lines")
    assert segments == int((alpha >= 0.1).sum()) == 5
    texts = [trace for trace in figure.data if trace.mode == "text"]
    assert [list(trace.text) for trace in texts] == [["a", "b", "c"]] * 2


def test_line_view_declines_long_inputs():
    figure = figures.line_view(np.eye(60), [str(i) for i in range(60)], max_tokens=48)
    assert "up to 48 tokens" in figure.layout.annotations[0].text


def _labels():
    rows = []
    for layer in range(2):
        for head in range(3):
            score = 0.1 * (layer * 3 + head)
            rows.append({"layer": layer, "head": head, "head_type": "induction", "score": score,
                         "ci_low": score - 0.05, "ci_high": score + 0.05, "chance": 0.02,
                         "label": "induction" if score > 0.35 else "none", "n_examples": 64})
            rows.append({"layer": layer, "head": head, "head_type": "previous_token", "score": 0.9,
                         "ci_low": 0.85, "ci_high": 0.95, "chance": 0.1, "label": "previous_token",
                         "n_examples": 64})
    return pd.DataFrame(rows)


def test_atlas_colours_the_chosen_types_scores_with_ci_in_hover():
    figure = atlas_figure.atlas_figure(_labels(), 2, 3, "induction", "score", selected=(1, 2))
    grid = _z(figure.data[0])
    np.testing.assert_allclose(grid, np.arange(6).reshape(2, 3) * 0.1)
    hover = figure.data[0].text[1][2]
    assert "L1H2" in hover and "0.500 [0.450, 0.550] 95% CI" in hover and "chance 0.020" in hover
    marker = figure.data[-1]
    assert (list(marker.x), list(marker.y)) == ([2], [1]) and marker.name == "selected"


def test_atlas_scores_use_the_fixed_scale_and_grey_what_is_not_labelled():
    table = _labels()
    table.loc[table.head_type == "induction", "chance"] = 0.3  # labelled: the scores 0.4 and 0.5 only
    figure = atlas_figure.atlas_figure(table, 2, 3, "induction", "score")
    score = next(trace for trace in figure.data if trace.name == "score")
    grey = next(trace for trace in figure.data if trace.name == "not labelled")
    assert (score.zmin, score.zmax) == (0.0, 1.0) and "fixed 0–1" in score.colorbar.title.text
    coloured = ~np.isnan(_z(score))
    np.testing.assert_array_equal(coloured, [[False, False, False], [False, True, True]])
    np.testing.assert_array_equal(~np.isnan(_z(grey)), ~coloured)
    # a near-chance score on a tiny range is not stretched over the scale: 0.004 stays at the bottom
    flat = pd.DataFrame([{"layer": 0, "head": h, "head_type": "induction", "score": 0.0039 + h * 1e-6,
                          "ci_low": 0.0039, "ci_high": 0.004, "chance": 0.0039} for h in range(2)])
    figure = atlas_figure.atlas_figure(flat, 1, 2, "induction", "score")
    assert np.isnan(_z(next(t for t in figure.data if t.name == "score"))).all()  # greyed: at chance


def test_q_value_decides_significance_where_present():
    row = pd.Series({"score": 0.5, "ci_low": 0.0, "chance": 0.4, "q_value": 0.01})
    assert reading.is_significant(row) and not reading.is_significant(row.copy().replace({0.01: 0.2}))


def test_atlas_by_label_is_categorical_with_a_legend():
    figure = atlas_figure.atlas_figure(_labels(), 2, 3, "induction", "label")
    np.testing.assert_array_equal(_z(figure.data[0]), [[1, 1, 1], [1, 0, 0]])  # 0 labelled, 1 not
    assert figure.data[0].showscale is False
    assert [t.name for t in figure.data if t.showlegend] == ["labelled", "not labelled", "no score"]


def test_atlas_without_labels_is_still_a_clickable_grid():
    figure = atlas_figure.atlas_figure(None, 3, 4, "induction")
    assert _z(figure.data[0]).shape == (3, 4)
    assert "no induction labels yet" in figure.layout.title.text
    assert "L2H3" in figure.data[0].text[2][3]


def test_contact_figure_puts_predicted_above_and_true_below_the_diagonal():
    rng = np.random.default_rng(1)
    predicted = rng.random((6, 6))
    predicted = (predicted + predicted.T) / 2
    true = (rng.random((6, 6)) > 0.5).astype(float)
    true = np.maximum(true, true.T)
    figure = protein_figures.contact_figure(predicted, true, pair=(1, 4))
    upper, lower = _z(figure.data[0]), _z(figure.data[1])
    i, j = np.triu_indices(6, 1)
    np.testing.assert_allclose(upper[i, j], predicted[i, j])
    np.testing.assert_allclose(lower[j, i], true[j, i])
    assert np.isnan(upper[j, i]).all() and np.isnan(lower[i, j]).all() and np.isnan(upper.diagonal()).all()
    assert [trace.name for trace in figure.data] == ["predicted", "true", "selected pair"]
    assert (list(figure.data[2].x), list(figure.data[2].y)) == ([5, 2], [2, 5])  # 1-based, both triangles


def test_contact_figure_without_structure_says_so():
    figure = protein_figures.contact_figure(np.zeros((4, 4)), None)
    assert np.isnan(_z(figure.data[1])).all()
    assert "upload a structure" in figure.layout.annotations[0].text


def test_residue_axes_stay_in_residue_units_when_pooled():
    figure = protein_figures.head_map_figure(np.zeros((800, 800)), pair=None, max_bins=400)
    heat = figure.data[0]
    assert _z(heat).shape == (400, 400)
    assert (heat.x0, heat.dx) == (1.5, 2)  # block k covers residues 2k+1, 2k+2


def test_pair_from_point_round_trips_the_marks():
    xs, ys = protein_figures.pair_marks((3, 9))
    assert protein_figures.pair_from_point({"x": xs[0], "y": ys[0]}, 20) == (3, 9)
    assert protein_figures.pair_from_point({"x": 25, "y": 1}, 20) is None
    assert protein_figures.pair_from_point(None, 20) is None


@pytest.mark.parametrize("fmt", ["png", "svg"])
def test_graph_config_sets_the_toolbar_image_format(fmt):
    config = figures.graph_config(fmt, "probe_x")
    assert config["toImageButtonOptions"]["format"] == fmt
    assert config["toImageButtonOptions"]["filename"] == "probe_x"
    assert config["showSendToCloud"] is False and "sendDataToCloud" in config["modeBarButtonsToRemove"]


def test_pair_patches_name_the_traces_of_their_own_figures():
    contacts, head_map = protein_figures.pair_patches((2, 9))
    operations = contacts.to_plotly_json()["operations"]
    assert {"operation": "Assign", "location": ["data", protein_figures.CONTACT_PAIR_TRACE, "x"],
            "params": {"value": [10, 3]}} in operations
    figure = protein_figures.contact_figure(np.zeros((12, 12)), None, pair=(2, 9))
    assert figure.data[protein_figures.CONTACT_PAIR_TRACE].name == "selected pair"
    assert protein_figures.head_map_figure(
        np.zeros((12, 12))).data[protein_figures.HEAD_MAP_PAIR_TRACE].name == "selected pair"
    assert any(op["location"] == ["data", protein_figures.HEAD_MAP_PAIR_TRACE, "y"]
               for op in head_map.to_plotly_json()["operations"])
    assert (figures.zoom_ranges({"xaxis.autorange": True}) == "reset"
            and figures.zoom_ranges({"dragmode": "pan"}) is None)


def test_thumbnail_png_round_trips():
    from app.thumbnails import colourize, decode_png, png_bytes

    matrix = np.array([[0.0, 0.5], [1.0, np.nan]])
    rgb = colourize(matrix)
    assert tuple(rgb[0, 0]) == (247, 251, 255) and tuple(rgb[1, 0]) == (8, 48,
        107) and tuple(rgb[1, 1]) == (230,) * 3
    np.testing.assert_array_equal(decode_png(png_bytes(rgb)), rgb)
    np.testing.assert_array_equal(decode_png(png_bytes(rgb, scale=3)), rgb.repeat(3, 0).repeat(3, 1))

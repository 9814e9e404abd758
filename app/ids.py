"""Component ids of the dashboard, in one place (layout, callbacks, keyboard script and browser tests use these)."""

# Page-wide
MODEL = "model"  # RadioItems: which loaded model every panel shows
IMAGE_FORMAT = "image-format"  # RadioItems: png | svg for the figure toolbars' camera button
SELECTED = "selected-head"  # Store: {"layer": int, "head": int}, shared by every panel
MODEL_INFO = "model-info"

# Head atlas
ATLAS = "atlas-graph"
HEAD_TYPE = "head-type"
COLOUR_BY = "colour-by"
LABEL_BUTTON = "label-button"
LABEL_POLL = "label-poll"  # Interval, enabled while a labelling job runs
LABEL_PROGRESS = "label-progress"
LABEL_VERSION = "label-version"  # Store: bumped when a labelling job finishes
ATLAS_MESSAGE = "atlas-message"
LABELS_DOWNLOAD_BUTTON = "labels-download-button"
LABELS_DOWNLOAD = "labels-download"

# Attention explorer
TEXT = "explorer-text"
AS_IDS = "explorer-as-ids"  # Checklist: the input is token ids
RUN = "explorer-run"
INPUT = "explorer-input"  # Store: {"model": spec, "ids": [int, ...]}
HEATMAP = "explorer-heatmap"
LINES = "explorer-lines"
OVERLAY = "explorer-overlay"  # Checklist: overlay the head type's target pattern
EXPLORER_MESSAGE = "explorer-message"  # input problems (too long, bad ids)
EXPLORER_VIEW_MESSAGE = "explorer-view-message"  # problems drawing the head
DOWNLOAD_MESSAGE = "download-message"
HEAD_LABEL = "explorer-head-label"
LAYER_PREV = "layer-prev"
LAYER_NEXT = "layer-next"
HEAD_PREV = "head-prev"
HEAD_NEXT = "head-next"
MATRIX_CSV_BUTTON = "matrix-csv-button"
MATRIX_NPY_BUTTON = "matrix-npy-button"
MATRIX_DOWNLOAD = "matrix-download"

# Proteins
SEQUENCE = "protein-sequence"
UPLOAD = "protein-upload"
CHAIN = "protein-chain"
PROTEIN_RUN = "protein-run"
PROTEIN = "protein-result"  # Store: {"key": str, "model": spec, "length": int, "has_structure": bool}
PAIR = "protein-pair"  # Store: {"i": int, "j": int} residue pair marked in both maps
CONTACTS = "protein-contacts"
HEAD_MAP = "protein-head-map"
LEADERBOARD = "protein-leaderboard"
PRECISION = "protein-precision"
PROTEIN_MESSAGE = "protein-message"
PROTEIN_VIEW_MESSAGE = "protein-view-message"

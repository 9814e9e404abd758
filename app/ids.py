"""Component ids of the dashboard, in one place (layout, callbacks, keyboard script and browser tests use
these): the page-wide ones every panel may read (MODEL, SELECTED, HEAD_TYPE, INPUT, LABEL_VERSION, …) and
those of the built-in panels. A new panel keeps its own ids in its module and names them in its ``PANEL``
(``Panel.ids``); an id claimed there that is also here is refused when the app is built (app/panel.py)."""

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
CHAIN = "protein-chain"  # a dcc.Dropdown of the uploaded file's protein chains (the chain used selected)
PROTEIN_LIMIT = "protein-limit"  # "at most N residues (...)": app.facts.ModelFacts.residue_limit
PRECISION_BOX = "protein-precision-box"  # hidden when the model predicts no contacts
PROTEIN_RUN = "protein-run"
PROTEIN = "protein-result"  # Store: {"key", "model", "length", "has_structure", "chains", "chain", "upload"}
PAIR = "protein-pair"  # Store: {"i": int, "j": int} residue pair marked in both maps
STRUCTURE3D_BOX = "protein-structure3d-box"  # the 3D view's panel (hidden without an uploaded structure)
STRUCTURE3D_TITLE = "protein-structure3d-title"
CONTACTS = "protein-contacts"
HEAD_MAP = "protein-head-map"
LEADERBOARD = "protein-leaderboard"
PRECISION = "protein-precision"
PROTEIN_MESSAGE = "protein-message"  # which protein the maps show (kept when a new input is refused)
PROTEIN_VIEW_MESSAGE = "protein-view-message"

# Page-wide additions (dashboard v2)
URL = "url"  # dcc.Location: model, head type, layer, head and a short input live in the query string
# Store: {"layers": int, "heads": int[, "attention_layers": [int]]} of the current model (keyboard stepping;
# attention_layers only for a hybrid: the layers with α)
SHAPE = "model-shape"
KEYS_SINK = "keys-sink"  # Store written by the clientside mirror of the selection (keyboard script)
PAGE_MESSAGE = "page-message"  # URL problems (an unknown model in a shared link)
LIMITS = "explorer-limits"  # the current model's input limits, beside Run
# the running labelling job and its estimate, beside the explorer (never blocking it)
LABEL_WAIT = "label-wait"

# Explorer additions
ALPHA_SCALE = "alpha-scale"  # Checklist: colour maximum = the head's own max instead of the fixed 1
TOKENS = "explorer-tokens"  # the token view: text coloured by attention from/to the focused token
TOKEN_FOCUS = "token-focus"  # Store: {"index": int} set by clicking a token (assets/tokens.js)
TOKEN_DIRECTION = "token-direction"  # RadioItems: colour by attention from | to the focused token
OVERLAY_NOTE = "overlay-note"

# Head grid
GRID = "head-grid"
GRID_MESSAGE = "grid-message"
THUMB = "thumb"  # pattern-matching type: {"type": THUMB, "layer": int, "head": int}

# Proteins additions
# wraps the Upload; carries data-max-bytes / data-accept for assets/upload.js
UPLOAD_BOX = "protein-upload-box"
PAIR_CLEAR = "protein-pair-clear"

# Architecture card
CARD = "architecture-card"
CARD_MESSAGE = "card-message"
# Store written by the clientside callback that re-arms every camera button
IMAGE_APPLIED = "image-format-applied"
ZOOM = "explorer-zoom"  # Store: {"q0", "q1", "k0", "k1"} token window of the heatmap (None: the whole input)
# Store: the axis keys of the heatmap's last relayout event that moved an axis ("xaxis.range[0]", …,
# "yaxis.autorange"), so that the {"autosize": true} event after it does not replace the zoom
HEATMAP_VIEW = "explorer-heatmap-view"
STRUCTURE_SET = "structure-set"  # DataTable: the per-head summary over a set of structures (--heads-summary)
STRUCTURE_SET_TITLE = "structure-set-title"
PROTEIN_ZOOM = "protein-zoom"  # Store: the residue maps' shared zoom {"xaxis": [a, b], "yaxis": [c, d]}
# Stores: each residue map's last relayout event that moved an axis (as HEATMAP_VIEW)
CONTACTS_VIEW = "protein-contacts-view"
HEAD_MAP_VIEW = "protein-head-map-view"

# Dashboard v3: reading in the browser (assets/explorer.js)
LAYER = "selected-layer"  # Store: {"layer": int}, follows SELECTED only when the layer changes (clientside)
# Store: one layer's α of every head for the current input (app/payload.py)
LAYER_DATA = "explorer-layer-data"
PATTERN = "explorer-pattern"  # Store: the head type's target cells per head of the layer, for the overlay
OFFSET_NOTE = "explorer-offset-note"  # the selected head's dominant argmax offset
TOKENS_SINK = "explorer-tokens-sink"  # Store written by the clientside token-view callback
URL_NOTE = "url-note"  # what a shared link named that is not here, and what replaced it
GLOSSARY = "glossary"
# DataTable of the labelled heads of the current type; a row click selects the head
LABELLED = "labelled-heads"
LABELLED_MESSAGE = "labelled-heads-message"
PROTEIN_SECTION = "protein-section"  # hidden for models that are not protein models
EXPLORER_SECTION = "explorer-section"
THEME = "theme-switch"
THEME_SINK = "theme-sink"
CARD_ONLY = "card-only-note"  # why a model shows only its architecture card
TEMPLATES = "plotly-templates"  # Store: the light and dark plotly templates (app/figures.py), for explorer.js
# why an upload or a sequence was refused (error styling); PROTEIN_MESSAGE stays
PROTEIN_ERROR = "protein-error"

# Circuit panel (app/panels/circuit.py): the head type's circuit beside the atlas
CIRCUIT_RUN = "circuit-run"  # Button: find the circuit of the selected type
CIRCUIT_NOTE = "circuit-note"  # what the panel shows (edges, forwards) or what to press
CIRCUIT_MESSAGE = "circuit-message"  # one-line problems (no labels, a model without views)
CIRCUIT_GRAPH = "circuit-graph"  # the host views.js draws the graph in (mountCircuit)
CIRCUIT_DATA = "circuit-data"  # Store: the circuit's payload (probe.circuits.Circuit.payload), or None
CIRCUIT_SINK = "circuit-sink"  # Store written by the clientside mount
CIRCUIT_SELECT_SINK = "circuit-select-sink"  # Store written by the clientside mark of the selected head

# Training history (probe app --history FILE)
HISTORY_BOX = "history-box"  # the panel (hidden without a history)
HISTORY_TIMELINE = "history-timeline"  # Iframe: the timeline SVG, the shown step dashed
HISTORY_SLIDER = "history-slider"  # Slider over the checkpoints: moves the page's model to that checkpoint
HISTORY_NOTE = "history-note"  # which checkpoint the page shows, and checkpoints not on this machine

// What probe's browser scripts share through `window`, and the shapes of the data the server writes for them,
// for `tsc --checkJs` (js/tsconfig.json). The scripts themselves stay plain JavaScript with JSDoc types.

/** The explorer's store for one (input, layer): app/payload.py layer_payload (or {error, model}). */
interface LayerPayload {
    model: string;
    key: string;
    layer: number;
    heads: number;
    n: number;
    tokens: string[];
    causal: boolean;
    alpha: string;  // base64 of uint16 round(α · scale), [head query key]
    scale: number;
    ids_count: number;
    name?: string;  // "L3", "enc.L1", "cross.L0"
    model_name?: string;  // the model's display name (probe.naming.display_name), in the heatmap's title
    query_tokens?: string[];
    axes?: {query: string; key: string};
    error?: string;
}

/** A head: its layer (flat layer number) and its head number. */
interface HeadRef {
    layer: number;
    head: number;
}

/** The grid's shape; attention_layers (ascending) are the layers with α of a hybrid. */
interface GridShape {
    layers: number;
    heads: number;
    attention_layers?: number[];
}

/** A zoomed window of the explorer's heatmap: queries [q0, q1), keys [k0, k1). */
interface Zoom {
    q0: number;
    q1: number;
    k0: number;
    k1: number;
}

/** A head type's targets for the overlay: per head (or one for all) [queries, keys]. */
interface TargetPattern {
    heads?: number[][][];
    note?: string;
}

/** What probe/views/view.py View.payload writes for views.js mount(). */
interface ViewData {
    version: number;
    model: string;
    title?: string;
    tokens: string[];
    n: number;
    causal: boolean;
    layers: number;
    heads: number;
    selected?: number[];
    thumbs: {bins: number; data: string; scale: string};
    types?: string[];
    badges?: {[headType: string]: {[layerHead: string]: string[]}};
    layer_names?: string[];
    maps?: {bins: number; factor: number; index: number[][]; data: string; scale: string};
}

/** The pure pieces of probe/views/assets/views.js (window.probeViews.core). */
/** One head of a circuit graph (probe/circuits/circuit.py Circuit.payload: nodes). */
interface CircuitNode {
    head: string;
    layer: number;
    head_index: number;
    labels: string | null;
    role: "receiver" | "sender";
}

/** One candidate edge of a circuit graph (EDGE_COLUMNS; NaN arrives as null). */
interface CircuitEdge {
    sender: string;
    receiver: string;
    mode: "Q" | "K" | "V";
    score: number | null;
    z: number | null;
    percentile: number | null;
    beats_random: boolean | null;
    effect: number | null;
    effect_z: number | null;
    beats_controls: boolean | null;
    edge_effect: number | null;
    edge_z: number | null;
    patched: boolean | null;
    in_circuit: boolean;
}

/** What probe/circuits/circuit.py Circuit.payload writes for views.js mountCircuit(). */
interface CircuitData {
    version: number;
    kind?: "head_type";  // absent: a task's circuit says "task" (TaskCircuitData)
    model: string;
    head_type: string;
    layers: number;
    heads: number;
    nodes: CircuitNode[];
    edges: CircuitEdge[];
    lines?: string[];
    notes?: string[];
    corruption?: string | null;
    type_effect?: number | null;
    total_effect?: number | null;
}

/** A node of a task's circuit graph (probe/circuits/task_circuit.py TaskCircuit.payload: nodes). */
interface TaskNode {
    name: string;  // "embed", "L0H1", "L0KV0", "L0.mlp", "logits"
    kind: "embed" | "head" | "kv" | "mlp" | "logits";
    layer: number;  // embed -1, logits: the number of layers
    index: number;
    column: number;  // embed 0, layer l's heads 2l + 1, its MLP 2l + 2, logits 2L + 1
    row: number;
}

/** One scored edge of a task's circuit graph (NaN arrives as null). */
interface TaskEdge {
    sender: string;
    receiver: string;
    input: "q" | "k" | "v" | "mlp" | "logits";
    score: number | null;
    abs_rank: number;
    in_circuit: boolean;
}

/** One point of the faithfulness curve. */
interface TaskCurvePoint {
    edges: number;
    share: number | null;
    random_share: number | null;
}

/** What TaskCircuit.payload writes for views.js mountCircuit() (kind "task"). */
interface TaskCircuitData {
    version: number;
    kind: "task";
    model: string;
    method: string | null;
    metric: string | null;
    corruption: string | null;
    clean_metric: number | null;
    corrupted_metric: number | null;
    pairs: number | null;
    share: number | null;
    size: number | null;
    layers: number;
    rows: number;
    nodes: TaskNode[];
    edges: TaskEdge[];
    total_edges: number;
    top: number;
    left_out: number;
    curve: TaskCurvePoint[];
    lines?: string[];
    notes?: string[];  // the untrained twins' own searches (TaskCircuit.twins), one line each
}

/** mountCircuit's options: the app selects the clicked head on its page. */
interface CircuitOptions {
    onSelect?(layer: number, head: number): void;
}

interface ProbeViewsCore {
    bytesOf(base64: string): Uint8Array;
    decodeUint16(base64: string, scale: number): Float32Array;
    float32Of(base64: string): Float32Array;
    dequantise(bytes: Uint8Array, offset: number, count: number, top: number): Float32Array;
    labels(tokens: string[], factor: number, start: number, first: number, count: number): string[];
    pooled(alpha: ArrayLike<number>, n: number, q0: number, q1: number, k0: number, k1: number,
           bins?: number): {z: number[][]; factor: number};
    headMax(alpha: ArrayLike<number>, n: number, causal: boolean): number;
    dominantOffset(alpha: ArrayLike<number>, n: number): {offset: number; share: number};
    offsetText(offset: number): string;
    share(alpha: ArrayLike<number>, n: number, targets: number[][], causal: boolean):
        {share: number; chance: number; rows: number} | null;
    percent(x: number): string;
    colourTokens(spans: HTMLCollection | HTMLElement[], alpha: ArrayLike<number>, n: number,
                 focus: number | null, pinned: number | null, direction: string, factor?: number,
                 dark?: boolean): void;
    step(current: HeadRef, axis: string, delta: number, shape: GridShape): HeadRef;
    STEP_KEYS: {[key: string]: [string, number]};
    typing(target: EventTarget | null): boolean;
    blues(t: number): number[];
    headName(layer: number, head: number, names?: string[]): string;
    layerName(layer: number, names?: string[]): string;
    fixed(value: number | null | undefined, digits: number, sign?: boolean): string;
    BINS: number;
}

interface ProbeViews {
    version: number;
    core: ProbeViewsCore;
    mount(root: HTMLElement, data: ViewData): object;
    mountAll(): void;
    sortable(table: HTMLTableElement): void;
    mountCircuit(root: HTMLElement, data: CircuitData | TaskCircuitData, options?: CircuitOptions): CircuitViewApi;
}

/** The circuit graph mounted on a root (views.js CircuitView). */
interface CircuitViewApi {
    select(layer: number, head: number, fromUser: boolean): void;
    svg(): string;
}

/** What probe/views/structure3d.py structure_payload writes for structure.js mount(). */
interface StructureData {
    version: number;
    kind: string;  // "structure3d"
    model: string;
    title?: string;
    theme: string;  // "light" or "dark"
    structure: string;
    chain: string;
    chains: string[];
    pdb: string;
    sequence: string;
    n: number;
    residue_of_position: number[];  // [L], -1 where a position has no residue in the structure
    token_of_position: number[];  // [L]
    labels: string[];  // [L] "T1"
    ca: (number[] | null)[];  // [L] x, y, z (Å) of the Cα, null where none is drawable
    heads: number[][];  // [[layer, head]]
    head_names: string[];
    head_notes: string[];
    selected: number[];  // [layer, head]
    maps: {side: number; data: string; scale: string};  // uint8 α [head L L], float32 scales (base64)
    pairs: number[][][];  // [head] of [query, key, weight]
    contacts: {true: number[][] | null; predicted: number[][] | null; [kind: string]: number[][] | null};
    params: {rule: string; min_weight: number; top: number; edge_scale: number; min_separation: number};
    height?: number;  // the viewer's height in pixels
}

/** The 3D view mounted on a root (structure.js Structure): what the app's bridge (structure3d.js) uses. */
interface StructureViewApi {
    theme: string;
    selected: number[];  // [layer, head]
    pair: number[] | null;  // [i, j]
    viewer?: ThreeDmolViewer | null;  // undefined without 3Dmol.js, null without WebGL
    select(layer: number, head: number, notify?: boolean): boolean;
    selectPair(pair: number[] | null, notify?: boolean): void;  // also selectPair(i, j, notify)
    setTheme(theme: string): void;
}

/** The 3D structure view of probe/views/assets/structure.js (window.probeStructure). */
interface ProbeStructure {
    version: number;
    core: object;
    mount(root: HTMLElement, data: StructureData): StructureViewApi;
    mountAll(): void;
}

/** An atom that 3Dmol.js hands to a click or hover callback: `resi` its residue number (1-based). */
interface ThreeDmolAtom {
    resi: number;
    [member: string]: any;
}

/** A 3Dmol.js viewer: what structure.js calls. */
interface ThreeDmolViewer {
    addModel(data: string, format: string): object;
    setClickable(selection: object, clickable: boolean, callback: (atom: ThreeDmolAtom) => void): void;
    setHoverable(selection: object, hoverable: boolean, hover: (atom: ThreeDmolAtom) => void,
                 unhover: () => void): void;
    zoomTo(): void;
    zoom(factor: number): void;
    setBackgroundColor(colour: string, alpha: number): void;
    setStyle(selection: object, style: object): void;
    removeAllShapes(): void;
    removeAllLabels(): void;
    addCylinder(spec: object): object;
    addSphere(spec: object): object;
    addLabel(text: string, spec: object): object;
    render(): void;
    pngURI(): string;
    [member: string]: any;
}

/** The vendored 3Dmol.js (probe/views/assets/3Dmol-min.js): what structure.js calls. */
interface ThreeDmol {
    createViewer(element: HTMLElement, config?: object): ThreeDmolViewer | null;
    [member: string]: any;
}

/** Dash's clientside namespace (set up by dash-renderer; an asset may run first): our functions live under
 * `probe`. */
interface DashClientside {
    no_update?: object;
    set_props?(id: string, props: object): void;
    probe?: {[name: string]: any};
    probeStructure?: {[name: string]: any};
    /** The running callback (dash-renderer): its outputs. */
    callback_context?: {outputs_list?: any; [member: string]: any};
}

/** A drawn plotly graph div: its full data and its config (read by plotly's toolbar camera). */
interface PlotlyGraphDiv extends HTMLElement {
    _fullData?: object[];
    _context?: {toImageButtonOptions?: {[option: string]: any}};
}

interface Window {
    probeViews: ProbeViews;
    probeStructure?: ProbeStructure;
    $3Dmol?: ThreeDmol;
    dash_clientside: DashClientside;
    Plotly: {update(gd: HTMLElement, data: object, layout: object, traces?: number[]): Promise<unknown>};
    /** The selected head and the grid's shape, written by app/panels/page.py; `pending` by keys.js. */
    probeState?: {selected?: HeadRef; shape?: GridShape; pending?: HeadRef};
}

interface HTMLElement {
    probeView?: object;  // the View mounted on this root (views.js mountAll: once per root)
    probeCircuit?: CircuitViewApi | null;  // the circuit graph mounted on this root (views.js mountCircuit)
    probeStructure?: StructureViewApi | null;  // the 3D view mounted on this root (structure.js mount)
    probeStructureBridge?: boolean;  // the app's bridge listens on this root (structure3d.js listen)
}

interface HTMLTableElement {
    probeSortable?: boolean;
}

"""Interactive circuit viewer: one self-contained HTML page per traced prompt.

    from accpp import viewer
    viewer.write_html(circuit, "build/circuit.html", title="IOI prompt 0")   # open with a browser
    viewer.show(circuit, title="IOI prompt 0")                               # inside a notebook
    viewer.save(circuit, "accpp/ioi_prompt0", title="IOI prompt 0")          # in a notebook: both

``save`` is what the notebooks use: it writes the page into the run's figure folder under the
figure naming rule (``<run>/figures/accpp/01_ioi_prompt0_viewer.html`` in notebook ``accpp/01_ioi``,
see :func:`compendium.plotting.prefixed`), from where ``compendium run --publish`` copies it into
``papers/accpp/figures/`` and the book shows it on the paper's figures page; it also shows the page
inline (:func:`show`), which is how the notebook's page in the book embeds it.

The page needs no network: the circuit is inlined as JSON and drawn by a small script of our own
(plain DOM + SVG: the parts ``viewer_assets/{base,model,layout,draw,panels}.js`` in one function
scope, and ``viewer.css``, inlined into the page); a Content-Security-Policy forbids any other
source. What the reader sees:

- a title and, unless the title already holds it, the prompt; the prompt's tokens, positions used
  by the circuit highlighted (the answer position in red; hovering a firing marks its destination
  and source tokens);
- the circuit in one of two layouts. *Layers across*: x = layer (embedding at the left, logits at
  the right), y = token position (one band per position used; inside a band a layer's nodes
  stack: bias offset, heads, output bias, MLP); query-side edges run within a band, key-side edges
  between bands, an edge that skips layers along a lane at the top of its target's band, so no
  edge crosses a node. *Tokens across, layers up* (compact, the way circuits are usually drawn):
  x = token position, y = layer, the embedding at the bottom and the logits at the top; it is
  chosen by itself when the graph is wider than its frame (many layers), and a menu switches. In
  both, the column labels stay at the top and the row labels at the left while the graph scrolls.
  Nodes are labelled compactly (``A5.3`` head, ``M12`` MLP, ``E`` embedding, ``B5`` output bias,
  ``O5.3`` bias offset) with their positions (``14<-10``: destination <- source);
- hover (click to pin) a node for its firing: layer, head, destination and source tokens with
  their text, A_ds, tau, A_ds after removing each side's signal; an edge for its side (query "d",
  solid blue; key "s", dashed orange; seed, red), singular directions (greedy order), rank,
  weight, drop, attribution and, when given, the signal's description with its judge score;
- a layer-range filter, a toggle collapsing MLP and embedding leaves into one node per layer, a
  minimum edge weight, a zoom, the layout menu, a search (a token's text, ``L5`` / ``layer 5``,
  ``A5.3`` / ``5.3``, a node's name such as ``M12``, or words of a description) that highlights
  what matches, groups of the reader's own (shift- or ctrl-click nodes to select them, or select
  the search matches; the group is drawn as one named node, and can be expanded again or
  ungrouped), and a table of the edges below the graph (click a header to sort);
- the view (filters, layout, search, groups, the pinned node or edge) is kept in the page's
  address after ``#``, so a link reproduces it ("link to this view" shows it);
- dark mode: the book's colour theme (its pages tell the framed viewers; a page that can read its
  parent follows the parent's ``data-theme``), else the reader's system setting.

Edge weights are the tracer's ``weight``; graphs without one (the ACC baseline's) use
``attribution`` or else ``share``.

``descriptions`` (from a signal-interpretation study) maps a signal to a description. Keys, tried in
this order for each edge (component names without positions: ``A5.3``, ``M12``, ``E``, ``B5``,
``O5.3``; a full node id is accepted for the upstream component too; singular indices as a tuple,
matched as a set):

1. the edge id (:func:`edge_ids`), e.g. ``"M0@10->A5.6@10<2:d@10"``;
2. ``(upstream, downstream, side, sing)``, e.g. ``("M0", "A5.6", "d", (6, 26))``;
3. ``(upstream, sing)``, e.g. ``("M0", (6, 26))`` (the brief's form: upstream component and SV
   indices, whatever head reads it).

A value is a string (a description without a score) or a dict with ``description`` (str) and
optional ``contexts`` (a list of strings, ``(text, value)`` pairs or ``{"text", "value"}`` dicts),
``score`` (the judge's score: a number, or ``{"own": x, "other": y}``, its balanced accuracy with
this description and with another signal's), ``checks`` (the describer's own checks, a list of
``{"check": text, "passed": bool}``), ``describer`` (its name) and ``others`` (descriptions of the
same signal by other describers, dicts of the same form). The page shows a description only with
its judge score (one without a score is named, not shown) and labels it "not informative" when
one of its checks failed. The header says how many of the described signals are signals of the
circuit drawn (a study usually describes the signals of several prompts' circuits).
"""
from __future__ import annotations

import html
import json
import math
import numbers
from collections.abc import Mapping, Sequence
from pathlib import Path

import networkx as nx

__all__ = ["write_html", "render_html", "page_data", "show", "save", "iframe_html", "edge_ids", "component_name",
           "node_label", "DATA_ELEMENT_ID"]

ASSETS = Path(__file__).with_name("viewer_assets")
DATA_ELEMENT_ID = "accpp-circuit-data"
from accpp.graph import KINDS, component_name  # noqa: E402  (component_name is part of this module's API)
SIDES = ("d", "s", "seed")
# stacking order inside one layer's column: bias offset (feeds the head of the same layer), heads,
# attention-output bias, MLP
_SUB = {"offset": 0, "head": 1, "bias": 2, "mlp": 3}

_CSP = ("default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:; "
        "base-uri 'none'; form-action 'none'")


# -- node and edge naming ------------------------------------------------------------------------


def node_label(d: Mapping) -> tuple[str, str]:
    """(name, positions) as drawn: ``("A5.3", "14<-10")``, ``("M12", "@10")``, ``("logits", "@14")``."""
    name = "logits" if d["kind"] == "logits" else component_name(d)
    dest = d.get("dest")
    if d["kind"] == "head":
        return name, f"{dest}\u2190{d.get('src')}"
    return name, "" if dest is None else f"@{dest}"


def edge_ids(g: nx.MultiDiGraph) -> list[str]:
    """One id per edge, in ``g.edges`` order: ``"{u}->{v}:{side}@{token}"`` (``#k`` appended to
    repeats of the same upstream, downstream, side and token)."""
    seen: dict[str, int] = {}
    out = []
    for u, v, d in g.edges(data=True):
        base = f"{u}->{v}:{d.get('side')}@{d.get('token')}"
        k = seen.get(base, 0)
        seen[base] = k + 1
        out.append(base if k == 0 else f"{base}#{k}")
    return out


# -- input ---------------------------------------------------------------------------------------
def _unpack(circuit_or_graph):
    """(graph, tokens, meta, extra) from a Circuit, a networkx graph, or their JSON forms."""
    from accpp.graph import graph_from_json

    obj = circuit_or_graph
    if isinstance(obj, nx.Graph):
        return obj, None, {}, {}
    if isinstance(obj, Mapping):
        if "graph" in obj:
            extra = {k: obj[k] for k in ("logit_diff", "n_firings", "seconds") if k in obj}
            return graph_from_json(obj["graph"]), obj.get("tokens"), dict(obj.get("meta") or {}), extra
        if "nodes" in obj and "edges" in obj:
            return graph_from_json(obj), None, {}, {}
    if hasattr(obj, "graph") and isinstance(obj.graph, nx.Graph):
        extra = {k: getattr(obj, k) for k in ("logit_diff", "n_firings", "seconds") if hasattr(obj, k)}
        return obj.graph, getattr(obj, "tokens", None), dict(getattr(obj, "meta", None) or {}), extra
    raise TypeError(f"expected a Circuit, a networkx graph, or their JSON dicts; got {type(obj).__name__}")


def _clean(x):
    """A JSON-safe copy: tuples/sets to lists, numpy/torch scalars to Python, NaN/inf to None."""
    if x is None or isinstance(x, (bool, str)):
        return x
    if isinstance(x, numbers.Integral):
        return int(x)
    if isinstance(x, numbers.Real):
        f = float(x)
        return f if math.isfinite(f) else None
    if isinstance(x, Mapping):
        return {str(k): _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple, set, frozenset)):
        items = sorted(x, key=repr) if isinstance(x, (set, frozenset)) else x
        return [_clean(v) for v in items]
    if hasattr(x, "tolist"):  # numpy arrays and scalars, torch tensors
        return _clean(x.tolist())
    return str(x)


def _check_graph(g: nx.Graph) -> None:
    for n, d in g.nodes(data=True):
        if not isinstance(n, str):
            raise TypeError(f"node ids must be strings (the tracer's form, e.g. 'A5.3@14<10'); got {n!r}")
        if d.get("kind") not in KINDS:
            raise ValueError(f"node {n!r}: 'kind' must be one of {', '.join(KINDS)} (the tracer's node "
                             f"attributes: kind, layer, head, dest, src); got {d.get('kind')!r}")
        if d["kind"] != "emb" and not isinstance(d.get("layer"), numbers.Integral):
            raise ValueError(f"node {n!r}: integer 'layer' missing (got {d.get('layer')!r})")
        if d["kind"] in ("head", "offset") and not isinstance(d.get("head"), numbers.Integral):
            raise ValueError(f"node {n!r}: integer 'head' missing (got {d.get('head')!r})")
        if d["kind"] == "head" and not isinstance(d.get("src"), numbers.Integral):
            raise ValueError(f"node {n!r}: integer 'src' (source position) missing (got {d.get('src')!r})")
        if not isinstance(d.get("dest"), numbers.Integral):
            raise ValueError(f"node {n!r}: integer 'dest' (token position) missing (got {d.get('dest')!r})")
    for u, v, d in g.edges(data=True):
        if d.get("side") not in SIDES:
            raise ValueError(f"edge {u!r} -> {v!r}: 'side' must be one of {SIDES}; got {d.get('side')!r}")


def _positions_used(g: nx.Graph) -> set[int]:
    used = set()
    for _, d in g.nodes(data=True):
        for k in ("dest", "src"):
            if isinstance(d.get(k), numbers.Integral) and d[k] >= 0:
                used.add(int(d[k]))
    for *_, d in g.edges(data=True):
        if isinstance(d.get("token"), numbers.Integral) and d["token"] >= 0:
            used.add(int(d["token"]))
    return used


# -- descriptions --------------------------------------------------------------------------------
def _norm_sing(s, where: str) -> tuple[int, ...]:
    if isinstance(s, numbers.Integral):
        return (int(s),)
    if isinstance(s, (str, bytes)) or not isinstance(s, (Sequence, set, frozenset)) and not hasattr(s, "tolist"):
        raise ValueError(f"descriptions key {where}: singular indices must be an int or a sequence of ints, got {s!r}")
    vals = s.tolist() if hasattr(s, "tolist") else list(s)
    if not all(isinstance(v, numbers.Integral) for v in vals):
        raise ValueError(f"descriptions key {where}: singular indices must be ints, got {s!r}")
    return tuple(sorted(int(v) for v in vals))


def _norm_component(c, where: str) -> str:
    if not isinstance(c, str) or not c:
        raise ValueError(f"descriptions key {where}: a component must be a name such as 'A5.3', 'M12', 'E' "
                         f"or a node id, got {c!r}")
    return c.split("@", 1)[0]  # a full node id names its component before '@'


def _norm_score(score, where: str):
    if isinstance(score, numbers.Real) and not isinstance(score, bool):
        return _clean(score)
    if isinstance(score, Mapping) and set(score) == {"own", "other"} and all(
            isinstance(score[k], numbers.Real) and not isinstance(score[k], bool) for k in score):
        return {"own": _clean(score["own"]), "other": _clean(score["other"])}
    raise ValueError(f"descriptions[{where}]: 'score' must be a number or {{'own': number, 'other': number}}; "
                     f"got {score!r}")


def _norm_checks(checks, where: str) -> list[dict]:
    if not isinstance(checks, Sequence) or isinstance(checks, (str, bytes)):
        raise ValueError(f"descriptions[{where}]: 'checks' must be a list of {{'check': text, 'passed': bool}}")
    out = []
    for c in checks:
        if not isinstance(c, Mapping) or not isinstance(c.get("check"), str) or not isinstance(c.get("passed"), bool):
            raise ValueError(f"descriptions[{where}]: a check must be {{'check': text, 'passed': bool}}; got {c!r}")
        out.append({"check": c["check"], "passed": c["passed"]})
    return out


def _norm_value(v, where: str, nested: bool = False) -> dict:
    if isinstance(v, str):
        return dict(description=v, contexts=[])
    if not isinstance(v, Mapping) or not isinstance(v.get("description"), str):
        raise ValueError(f"descriptions[{where}] must be a string or a dict with a 'description' string "
                         f"(and optional 'contexts', 'score', 'checks', 'describer', 'others'); got {v!r}")
    contexts = []
    for c in v.get("contexts") or []:
        if isinstance(c, str):
            contexts.append(dict(text=c, value=None))
        elif isinstance(c, Mapping) and isinstance(c.get("text"), str):
            contexts.append(dict(text=c["text"], value=_clean(c.get("value"))))
        elif isinstance(c, Sequence) and len(c) == 2 and isinstance(c[0], str):
            contexts.append(dict(text=c[0], value=_clean(c[1])))
        else:
            raise ValueError(f"descriptions[{where}]: a context must be a string, a (text, value) pair or a "
                             f"{{'text', 'value'}} dict; got {c!r}")
    out = dict(description=v["description"], contexts=contexts)
    if v.get("score") is not None:
        out["score"] = _norm_score(v["score"], where)
    if v.get("checks") is not None:
        out["checks"] = _norm_checks(v["checks"], where)
    if v.get("describer") is not None:
        if not isinstance(v["describer"], str):
            raise ValueError(f"descriptions[{where}]: 'describer' must be a name (a string); got {v['describer']!r}")
        out["describer"] = v["describer"]
    if v.get("others"):
        if nested or not isinstance(v["others"], Sequence) or isinstance(v["others"], (str, bytes)):
            raise ValueError(f"descriptions[{where}]: 'others' must be a list of descriptions (not nested)")
        out["others"] = [_norm_value(o, f"{where}.others[{i}]", nested=True) for i, o in enumerate(v["others"])]
    extra = {k: _clean(x) for k, x in v.items()
             if k not in ("description", "contexts", "score", "checks", "describer", "others")}
    return {**out, **extra}


def _index_descriptions(descriptions: Mapping) -> dict:
    if not isinstance(descriptions, Mapping):
        raise TypeError(f"descriptions must be a mapping, got {type(descriptions).__name__}")
    index = {}
    for key, val in descriptions.items():
        where = repr(key)
        if isinstance(key, str):
            nk = ("edge", key)
        elif isinstance(key, tuple) and len(key) == 4:
            up, down, side, sing = key
            if side not in ("d", "s"):
                raise ValueError(f"descriptions key {where}: side must be 'd' (query) or 's' (key), got {side!r}")
            nk = ("full", _norm_component(up, where), _norm_component(down, where), side, _norm_sing(sing, where))
        elif isinstance(key, tuple) and len(key) == 2:
            nk = ("up", _norm_component(key[0], where), _norm_sing(key[1], where))
        else:
            raise ValueError(f"descriptions key {where}: expected an edge id string, (upstream, downstream, side, "
                             "sing) or (upstream, sing)")
        if nk in index:
            raise ValueError(f"descriptions key {where} names the same signal as an earlier key")
        index[nk] = _norm_value(val, where)
    return index


def _lookup(index: dict, eid: str, up: str, down: str, side: str, sing) -> dict | None:
    s = tuple(sorted(int(k) for k in sing))
    for k in (("edge", eid), ("full", up, down, side, s), ("up", up, s)):
        if k in index:
            return index[k]
    return None


# -- page ----------------------------------------------------------------------------------------
def page_data(circuit_or_graph, *, title: str, tokens=None, descriptions=None) -> dict:
    """The JSON object the page draws: title, tokens, meta, nodes (with a ``view`` dict: label,
    positions, column) and edges (with ``id`` and, where matched, ``desc``)."""
    if not isinstance(title, str):
        raise TypeError(f"title must be a string, got {type(title).__name__}")
    g, ctokens, meta, extra = _unpack(circuit_or_graph)
    _check_graph(g)
    tokens = ctokens if tokens is None else tokens
    if tokens is not None:
        if isinstance(tokens, str) or not all(isinstance(t, str) for t in tokens):
            raise TypeError("tokens must be a list of strings (one per prompt position)")
        tokens = list(tokens)
        used = _positions_used(g)
        if used and max(used) >= len(tokens):
            raise ValueError(f"the circuit uses position {max(used)} but only {len(tokens)} tokens were given")
    index = _index_descriptions(descriptions) if descriptions is not None else {}
    n_layers = max([int(d["layer"]) for _, d in g.nodes(data=True) if d["kind"] == "logits"] or
                   [int(d["layer"]) + 1 for _, d in g.nodes(data=True) if d["kind"] != "emb"] or [0])
    nodes = []
    for n, d in g.nodes(data=True):
        name, pos = node_label(d)
        kind = d["kind"]
        layer = -1 if kind == "emb" else int(d["layer"])
        col = -1 if kind == "emb" else (n_layers if kind == "logits" else layer)
        node = {"id": n, **_clean(dict(d))}
        node["view"] = dict(name=name, pos=pos, comp=component_name(d), col=col, layer=layer, sub=_SUB.get(kind, 0))
        nodes.append(node)
    edges = []
    matched = set()
    for eid, (u, v, d) in zip(edge_ids(g), g.edges(data=True)):
        e = {"id": eid, "source": u, "target": v, **_clean(dict(d))}
        e.setdefault("sing", [])
        if e.get("weight") is None:
            e["weight"] = e.get("attribution", e.get("share"))
        if index and d["side"] in ("d", "s"):
            desc = _lookup(index, eid, component_name(g.nodes[u]), component_name(g.nodes[v]), d["side"], e["sing"])
            if desc is not None:
                e["desc"] = desc
                matched.add(id(desc))
        edges.append(e)
    meta = _clean(meta)
    for k, val in extra.items():
        meta.setdefault(k, _clean(val))
    return dict(title=title, tokens=tokens, meta=meta, n_layers=n_layers, nodes=nodes, edges=edges,
                descriptions=dict(given=len(index), matched=len(matched)))


def _json_for_script(data) -> str:
    """JSON that cannot end its <script> element: '<', '>', '&' and U+2028/9 become \\u escapes."""
    text = json.dumps(data, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    for ch, esc in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"),
                    ("\u2029", "\\u2029")):
        text = text.replace(ch, esc)
    return text


SCRIPT_PARTS = ("base.js", "model.js", "layout.js", "draw.js", "panels.js")


def _asset(name: str) -> str:
    path = ASSETS / name
    if not path.is_file():
        raise FileNotFoundError(f"the viewer's asset {path} is missing: install the package from the repository "
                                "(pip install -e .) or ship accpp/viewer_assets/ as package data")
    text = path.read_text(encoding="utf-8")
    if "</" in text:  # an inlined asset must not close its element
        bad = text.index("</")
        raise RuntimeError(f"viewer asset {name} contains '</' at offset {bad}: it would end its inline element")
    return text


def render_html(circuit_or_graph, *, title: str, tokens=None, descriptions=None) -> str:
    """The self-contained page as a string (see :func:`write_html`)."""
    data = page_data(circuit_or_graph, title=title, tokens=tokens, descriptions=descriptions)
    return (
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        f"<meta http-equiv=\"Content-Security-Policy\" content=\"{_CSP}\">\n"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
        "<link rel=\"icon\" href=\"data:,\">\n"
        f"<title>{html.escape(title)}</title>\n<style>\n{_asset('viewer.css')}\n</style>\n</head>\n<body>\n"
        "<div id=\"accpp-viewer\"><noscript>This circuit viewer needs JavaScript.</noscript></div>\n"
        f"<script type=\"application/json\" id=\"{DATA_ELEMENT_ID}\">{_json_for_script(data)}</script>\n"
        f"<script>\n{_script()}\n</script>\n</body>\n</html>\n")


def _script() -> str:
    """The viewer's script: its parts in one function scope (they share their names)."""
    return "(function () {\n'use strict';\n" + "\n".join(_asset(p) for p in SCRIPT_PARTS) + "\n})();"


def write_html(circuit_or_graph, path, *, title: str, tokens=None, descriptions=None) -> Path:
    """Write the interactive page for one traced prompt and return its path.

    ``circuit_or_graph``: a :class:`accpp.graph.Circuit`, its graph (networkx, the tracer's node and
    edge attributes) or either's JSON dict. ``tokens``: the prompt's token strings (default: the
    circuit's). ``descriptions``: signal descriptions (see the module docstring).
    """
    from compendium.atomic import write_text

    return write_text(path, render_html(circuit_or_graph, title=title, tokens=tokens, descriptions=descriptions))


def iframe_html(circuit_or_graph, *, title: str, tokens=None, descriptions=None, height: int = 760) -> str:
    """A ``<div>`` holding an ``<iframe srcdoc=...>`` with the page (sandboxed: scripts allowed, nothing else)."""
    return _iframe(render_html(circuit_or_graph, title=title, tokens=tokens, descriptions=descriptions), title, height)


def _iframe(page: str, title: str, height: int) -> str:
    return (f"<div class=\"accpp-viewer-frame\"><iframe srcdoc=\"{html.escape(page, quote=True)}\" "
            f"sandbox=\"allow-scripts\" title=\"{html.escape(title, quote=True)}\" "
            f"style=\"width:100%;height:{int(height)}px;border:1px solid #ccc\"></iframe></div>")


def show(circuit, *, title: str | None = None, tokens=None, descriptions=None, height: int = 760):
    """Display the page in a notebook (an iframe via srcdoc); returns None."""
    from IPython.display import HTML, display

    if title is None:
        meta = getattr(circuit, "meta", None) or {}
        title = str(meta.get("text") or meta.get("model") or "ACC++ circuit")
    display(HTML(iframe_html(circuit, title=title, tokens=tokens, descriptions=descriptions, height=height)))


VIEWER_SUFFIX = "_viewer"


def save(circuit, name: str, *, title: str, tokens=None, descriptions=None, show: bool = True, height: int = 760):
    """Write the page as a figure of this run and (``show``) display it; return its path.

    ``name`` is ``"<paper>/<name>"`` as for :func:`compendium.plotting.savefig`; the file is
    ``<run>/figures/<paper>/<NN>_<name>_viewer.html`` (NN the notebook's number, ``_viewer`` added
    unless present), relative to the repository root in the returned path.
    """
    import re

    from compendium import paths, runs
    from compendium.plotting import SavedFigure, prefixed

    if not isinstance(name, str) or name.count("/") != 1 or not re.fullmatch(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+", name) \
            or ".." in name:
        raise ValueError(f"viewer page names look like '<paper>/<name>' (letters, digits, _ . -), "
                         f"e.g. 'accpp/ioi_prompt0'; got {name!r}")
    if not name.endswith(VIEWER_SUFFIX):
        name += VIEWER_SUFFIX
    page = render_html(circuit, title=title, tokens=tokens, descriptions=descriptions)
    paper, fname = prefixed(name).split("/")
    from compendium.atomic import write_text

    path = write_text(runs.figures_dir(paper) / f"{fname}.html", page)
    if show:
        from IPython.display import HTML, display

        display(HTML(_iframe(page, title, height)))
    return SavedFigure(paths.display(path))

/* ACC++ circuit viewer: plain DOM + SVG, no library, no network.
 * Reads the circuit from the JSON element #accpp-circuit-data (written by accpp/viewer.py).
 * Layout: x = one column per (layer, component kind) used, logits at the right;
 *         y = one band per token position used, nodes of one column stacked inside a band.
 * All text coming from the data is inserted with textContent (never parsed as HTML). */
(function () {
  'use strict';

  var DATA = JSON.parse(document.getElementById('accpp-circuit-data').textContent);
  var SVGNS = (function () {  // the SVG namespace, read from the parser rather than spelled out
    var probe = document.createElement('div');
    probe.innerHTML = '<svg>';  // the parser closes it
    return probe.firstChild.namespaceURI;
  })();

  var NODE_W = 58, NODE_H = 26, ROW_H = 31, COL_W = 82, BAND_GAP = 10, LANE = 3.5;
  var LEFT = 140, TOP = 26, RIGHT = 24;  // band-label pane width, column-label pane height
  var SIDE_NAME = {d: 'query (d)', s: 'key (s)', seed: 'seed'};
  var KIND_NAME = {head: 'attention firing', mlp: 'MLP output', emb: 'embedding', bias: 'attention-output bias',
                   offset: 'bias offset (query/key bias folded in)', logits: 'logit difference'};

  var nodes = DATA.nodes, edges = DATA.edges, tokens = DATA.tokens, meta = DATA.meta || {};
  var nodeById = {};
  nodes.forEach(function (n) { nodeById[n.id] = n; });
  var inEdges = {}, outEdges = {};
  edges.forEach(function (e) {
    (inEdges[e.target] = inEdges[e.target] || []).push(e);
    (outEdges[e.source] = outEdges[e.source] || []).push(e);
  });
  var LMAX = DATA.n_layers;

  var state = {lo: -1, hi: LMAX, collapse: false, minWeight: 0, zoom: 1, sortKey: 'weight', sortDir: -1, pinned: null};
  var view = null;  // the current display graph (after filter and collapse)
  var els = {};

  // -- small helpers -------------------------------------------------------------------------------
  function h(tag, attrs, children) {
    var el = document.createElement(tag);
    setAttrs(el, attrs);
    (children || []).forEach(function (c) {
      if (c === null || c === undefined) return;
      el.appendChild(typeof c === 'string' ? document.createTextNode(c) : c);
    });
    return el;
  }
  function s(tag, attrs) {
    var el = document.createElementNS(SVGNS, tag);
    setAttrs(el, attrs);
    return el;
  }
  function setAttrs(el, attrs) {
    Object.keys(attrs || {}).forEach(function (k) {
      if (k === 'text') el.textContent = attrs[k];
      else if (k === 'cls') el.setAttribute('class', attrs[k]);
      else el.setAttribute(k, attrs[k]);
    });
  }
  function fmt(x) {
    if (x === null || x === undefined || typeof x !== 'number') return '\u2014';
    var a = Math.abs(x);
    if (a === 0) return '0';
    if (a >= 100) return x.toFixed(1);
    if (a < 1e-3) return x.toExponential(2);
    return x.toPrecision(3);
  }
  function tokText(i) {
    if (!tokens || i === null || i === undefined || i < 0 || i >= tokens.length) return null;
    return tokens[i];
  }
  function tokLabel(i) {  // 10 " Mary"
    var t = tokText(i);
    return t === null ? String(i) : i + ' ' + JSON.stringify(t);
  }
  function tokShort(i) {  // visible whitespace, clipped
    var t = tokText(i);
    if (t === null) return '';
    t = t.replace(/\n/g, '\u21b5').replace(/\t/g, '\u21e5').replace(/ /g, '\u00b7');
    return t.length > 14 ? t.slice(0, 13) + '\u2026' : t;
  }
  function layerName(l) { return l < 0 ? 'E' : (l >= LMAX ? 'logits' : String(l)); }
  function absW(e) { return Math.abs(typeof e.weight === 'number' ? e.weight : 0); }

  // -- display graph: filter by layer range and weight, collapse leaves --------------------------------
  function buildView() {
    var dnodes = [], dmap = {}, byId = {};
    nodes.forEach(function (n) {
      var l = n.view.layer;
      if (l < state.lo || l > state.hi) return;
      if (state.collapse && (n.kind === 'mlp' || n.kind === 'emb')) {
        var key = 'agg:' + n.view.comp;
        if (!byId[key]) {
          byId[key] = {id: key, agg: true, kind: n.kind, members: [], view: {name: n.view.name, pos: '', comp: n.view.comp,
                       col: n.view.col, layer: l}};
          dnodes.push(byId[key]);
        }
        byId[key].members.push(n);
        byId[key].view.pos = '\u00d7' + byId[key].members.length;
        dmap[n.id] = key;
      } else {
        var d = {id: n.id, agg: false, kind: n.kind, node: n, view: n.view};
        byId[n.id] = d;
        dnodes.push(d);
        dmap[n.id] = n.id;
      }
    });
    var dedges = [], emap = {}, tableEdges = [];
    edges.forEach(function (e) {
      var a = dmap[e.source], b = dmap[e.target];
      if (a === undefined || b === undefined) return;
      if (e.side !== 'seed' && absW(e) < state.minWeight) return;
      tableEdges.push(e);
      var key = a !== e.source ? a + '|' + b + '|' + e.side : e.id;
      if (!emap[key]) {
        emap[key] = {id: key, source: a, target: b, side: e.side, members: [], weight: 0};
        dedges.push(emap[key]);
      }
      emap[key].members.push(e);
      emap[key].weight += (typeof e.weight === 'number' ? e.weight : 0);
    });
    return {nodes: dnodes, byId: byId, dmap: dmap, edges: dedges, tableEdges: tableEdges};
  }

  // Layout. Columns: layers used (E, 0..L-1, logits). Bands: token positions used, top to bottom;
  // collapsed leaves go to one extra band at the bottom. Inside a (band, column) cell nodes stack:
  // offset, heads, output bias, MLP, each by source position.
  // Edges between adjacent columns are S-curves inside the gap between the columns; longer ones
  // leave the source into the gap after its column, run along a lane at the top of the target's
  // band (above its nodes), and come down in the gap before the target: they never cross a node.
  var AGG_BAND = 'agg';
  function bandOf(n) { return n.agg ? AGG_BAND : n.node.dest; }

  function layout(v) {
    var cols = [];
    v.nodes.forEach(function (n) { if (cols.indexOf(n.view.col) < 0) cols.push(n.view.col); });
    cols.sort(function (a, b) { return a - b; });
    var colIdx = {}, colX = {};
    cols.forEach(function (c, i) { colIdx[c] = i; colX[c] = i * COL_W + COL_W / 2 + 4; });
    var bands = [], cells = {};
    v.nodes.forEach(function (n) {
      var b = bandOf(n);
      if (bands.indexOf(b) < 0) bands.push(b);
      var k = b + ':' + n.view.col;
      (cells[k] = cells[k] || []).push(n);
    });
    bands.sort(function (a, b) { return a === AGG_BAND ? 1 : (b === AGG_BAND ? -1 : a - b); });
    var rows = {};
    Object.keys(cells).forEach(function (k) {
      cells[k].sort(function (a, b) {
        var sa = a.agg ? 0 : a.node.src, sb = b.agg ? 0 : b.node.src;
        return (a.view.sub - b.view.sub) || (sa - sb) || (a.id < b.id ? -1 : 1);
      });
      var band = cells[k][0] && bandOf(cells[k][0]);
      rows[band] = Math.max(rows[band] || 0, cells[k].length);
    });
    var nodeBand = {}, nodeCol = {};
    v.nodes.forEach(function (n) { nodeBand[n.id] = bandOf(n); nodeCol[n.id] = colIdx[n.view.col]; });
    // lanes: one per (source node, target band) for edges that skip a column; interval colouring
    var groups = {};
    v.edges.forEach(function (e) {
      var i = nodeCol[e.source], j = nodeCol[e.target];
      if (j - i <= 1) return;
      var key = e.source + '|' + nodeBand[e.target];
      var g = groups[key] = groups[key] || {band: nodeBand[e.target], lo: i, hi: j, edges: []};
      g.hi = Math.max(g.hi, j);
      g.edges.push(e);
    });
    var laneOf = {}, nLanes = {};
    var byBand = {};
    Object.keys(groups).forEach(function (k) { var g = groups[k]; (byBand[g.band] = byBand[g.band] || []).push(g); });
    Object.keys(byBand).forEach(function (b) {
      var gs = byBand[b].sort(function (x, y) { return (x.lo - y.lo) || (y.hi - x.hi); });
      var ends = [];
      gs.forEach(function (g) {
        var lane = 0;
        while (lane < ends.length && ends[lane] >= g.lo) lane++;  // shares no column with the lane's last run
        ends[lane] = g.hi;
        g.edges.forEach(function (e) { laneOf[e.id] = lane; });
      });
      nLanes[b] = ends.length;
    });
    var bandTop = {}, bandH = {}, laneTop = {}, y = 6;
    bands.forEach(function (b) {
      bandTop[b] = y;
      laneTop[b] = y + 4;
      var lanesH = (nLanes[b] || 0) * LANE;
      bandH[b] = 4 + lanesH + Math.max(1, rows[b] || 0) * ROW_H + 4;
      y += bandH[b] + BAND_GAP;
    });
    var pos = {};
    Object.keys(cells).forEach(function (k) {
      cells[k].forEach(function (n, i) {
        var b = bandOf(n);
        pos[n.id] = {x: colX[n.view.col], y: laneTop[b] + (nLanes[b] || 0) * LANE + i * ROW_H + ROW_H / 2};
      });
    });
    var routes = {};
    v.edges.forEach(function (e) {
      var a = pos[e.source], b = pos[e.target];
      var x1 = a.x + NODE_W / 2, y1 = a.y, x2 = b.x - NODE_W / 2 - 1, y2 = b.y;
      if (laneOf[e.id] === undefined) {
        var dx = Math.max(8, (x2 - x1) / 2);
        routes[e.id] = 'M ' + x1 + ' ' + y1 + ' C ' + (x1 + dx) + ' ' + y1 + ', ' + (x2 - dx) + ' ' + y2 + ', ' + x2 + ' ' + y2;
        return;
      }
      var lane = laneOf[e.id], gap = COL_W - NODE_W;
      var ly = laneTop[nodeBand[e.target]] + lane * LANE + LANE / 2;
      var off = 3 + (lane % 6) * (gap - 8) / 6;
      var xg1 = x1 + off, xg2 = x2 - gap + 2 + off;
      routes[e.id] = rounded([[x1, y1], [xg1, y1], [xg1, ly], [xg2, ly], [xg2, y2], [x2, y2]], 9);
    });
    return {cols: cols, colX: colX, bands: bands, bandTop: bandTop, bandH: bandH, pos: pos, routes: routes,
            width: cols.length * COL_W + 8 + RIGHT, height: Math.max(y, 40)};
  }

  function rounded(pts, r) {  // a polyline with rounded corners
    var d = 'M ' + pts[0][0] + ' ' + pts[0][1];
    for (var i = 1; i < pts.length - 1; i++) {
      var p = pts[i], a = pts[i - 1], b = pts[i + 1];
      var la = Math.hypot(p[0] - a[0], p[1] - a[1]), lb = Math.hypot(b[0] - p[0], b[1] - p[1]);
      var rr = Math.min(r, la / 2, lb / 2);
      if (rr < 0.5) { d += ' L ' + p[0] + ' ' + p[1]; continue; }
      var ax = p[0] - (p[0] - a[0]) * rr / la, ay = p[1] - (p[1] - a[1]) * rr / la;
      var bx = p[0] + (b[0] - p[0]) * rr / lb, by = p[1] + (b[1] - p[1]) * rr / lb;
      d += ' L ' + ax.toFixed(1) + ' ' + ay.toFixed(1) + ' Q ' + p[0] + ' ' + p[1] + ' ' + bx.toFixed(1) + ' ' + by.toFixed(1);
    }
    var last = pts[pts.length - 1];
    return d + ' L ' + last[0] + ' ' + last[1];
  }

  // -- drawing --------------------------------------------------------------------------------------
  function colName(c) {
    if (c < 0) return 'E';
    if (c >= LMAX) return 'logits';
    return 'L' + c;
  }
  function bandName(b) { return b === AGG_BAND ? 'collapsed' : null; }

  function drawBands(svg, L, width, withLabels) {
    L.bands.forEach(function (b, i) {
      svg.appendChild(s('rect', {x: 0, y: L.bandTop[b] - BAND_GAP / 2, width: width, height: L.bandH[b] + BAND_GAP,
                                 cls: 'band' + (i % 2 ? ' odd' : '') + (b === meta.position ? ' answer' : '') +
                                      (b === AGG_BAND ? ' aggband' : '')}));
      if (!withLabels) return;
      var lab = s('text', {x: 8, y: L.bandTop[b] + L.bandH[b] / 2 + 4, cls: 'band-label', 'data-pos': b});
      if (b === AGG_BAND) {
        lab.appendChild(s('tspan', {text: 'collapsed leaves'}));
      } else {
        lab.appendChild(s('tspan', {cls: 'band-pos', text: String(b) + ' '}));
        lab.appendChild(s('tspan', {text: tokShort(b)}));
      }
      svg.appendChild(lab);
    });
  }

  function drawGraph() {
    var v = view, L = layout(v);
    view.layout = L;
    // four panes: corner, column labels (sticky top), band labels (sticky left), the graph
    var corner = s('svg', {width: LEFT, height: TOP, cls: 'pane corner'});
    corner.appendChild(s('text', {x: 8, y: TOP - 10, cls: 'corner-label', text: 'position \\ layer'}));
    var head = s('svg', {width: L.width, height: TOP, cls: 'pane colhead'});
    L.cols.forEach(function (c) {
      head.appendChild(s('text', {x: L.colX[c], y: TOP - 10, cls: 'col-label', text: colName(c)}));
    });
    var side = s('svg', {width: LEFT, height: L.height, cls: 'pane rowhead'});
    drawBands(side, L, LEFT, true);
    var svg = s('svg', {width: L.width, height: L.height, cls: 'graph', role: 'img', 'aria-label': 'circuit graph'});
    var defs = s('defs');
    ['d', 's', 'seed'].forEach(function (sd) {
      var m = s('marker', {id: 'arrow-' + sd, viewBox: '0 0 10 10', refX: 9, refY: 5, markerWidth: 7,
                           markerHeight: 7, markerUnits: 'userSpaceOnUse', orient: 'auto'});
      m.appendChild(s('path', {d: 'M 0 0 L 10 5 L 0 10 z', cls: 'arrow side-' + sd}));
      defs.appendChild(m);
    });
    svg.appendChild(defs);
    var bg = s('rect', {x: 0, y: 0, width: L.width, height: L.height, cls: 'bg'});
    svg.appendChild(bg);
    drawBands(svg, L, L.width, false);
    L.cols.forEach(function (c) {  // faint column guides
      svg.appendChild(s('line', {x1: L.colX[c], x2: L.colX[c], y1: 0, y2: L.height, cls: 'col-guide'}));
    });
    if (!v.nodes.length) {
      svg.appendChild(s('text', {x: 10, y: 30, cls: 'empty', text: 'no node in this layer range'}));
    }
    var wmax = {sig: 0, seed: 0};
    v.edges.forEach(function (e) {
      var k = e.side === 'seed' ? 'seed' : 'sig';
      wmax[k] = Math.max(wmax[k], Math.abs(e.weight));
    });
    var gEdges = s('g', {cls: 'edges'});
    v.edges.slice().sort(function (a, b) { return Math.abs(a.weight) - Math.abs(b.weight); }).forEach(function (e) {
      var d = L.routes[e.id];
      var m = wmax[e.side === 'seed' ? 'seed' : 'sig'] || 1;
      var f = Math.sqrt(Math.abs(e.weight) / m);  // 0..1
      var g = s('g', {cls: 'edge side-' + e.side, 'data-edge': e.id});
      g.appendChild(s('path', {d: d, cls: 'vis', 'stroke-width': (0.7 + 3.3 * f).toFixed(2),
                               'stroke-opacity': (0.22 + 0.6 * f).toFixed(2), 'marker-end': 'url(#arrow-' + e.side + ')'}));
      g.appendChild(s('path', {d: d, cls: 'hit'}));
      g.addEventListener('mouseenter', function (ev) { hover({type: 'edge', item: e}, ev); });
      g.addEventListener('mousemove', moveTip);
      g.addEventListener('mouseleave', unhover);
      g.addEventListener('click', function (ev) { ev.stopPropagation(); pin({type: 'edge', item: e}, ev); });
      gEdges.appendChild(g);
    });
    svg.appendChild(gEdges);
    var gNodes = s('g', {cls: 'nodes'});
    v.nodes.forEach(function (n) {
      var p = L.pos[n.id];
      var cls = 'node kind-' + n.kind + (n.agg ? ' agg' : '') + (!n.agg && n.kind === 'head' && !n.node.traced ? ' untraced' : '');
      var g = s('g', {cls: cls, 'data-node': n.id, transform: 'translate(' + p.x + ',' + p.y + ')', tabindex: 0});
      g.appendChild(s('rect', {x: -NODE_W / 2, y: -NODE_H / 2, width: NODE_W, height: NODE_H, rx: 5}));
      g.appendChild(s('text', {y: n.view.pos ? -1.5 : 4, cls: 'nm', text: n.view.name}));
      if (n.view.pos) g.appendChild(s('text', {y: 9.5, cls: 'ps', text: n.view.pos}));
      g.addEventListener('mouseenter', function (ev) { hover({type: 'node', item: n}, ev); });
      g.addEventListener('mousemove', moveTip);
      g.addEventListener('mouseleave', unhover);
      g.addEventListener('click', function (ev) { ev.stopPropagation(); pin({type: 'node', item: n}, ev); });
      g.addEventListener('focus', function () { hover({type: 'node', item: n}, null); });
      g.addEventListener('blur', unhover);
      gNodes.appendChild(g);
    });
    svg.appendChild(gNodes);
    bg.addEventListener('click', unpin);
    var grid = h('div', {cls: 'graph-grid'});
    grid.style.gridTemplateColumns = LEFT + 'px ' + L.width + 'px';
    grid.style.gridTemplateRows = TOP + 'px ' + L.height + 'px';
    [corner, head, side, svg].forEach(function (x) { grid.appendChild(x); });
    els.graph.textContent = '';
    els.graph.appendChild(grid);
    els.svg = svg;
    els.grid = grid;
    applyZoom();
  }
  function applyZoom() { if (els.grid) els.grid.style.zoom = String(state.zoom); }

  // -- tooltip --------------------------------------------------------------------------------------
  function row(label, value) {
    return h('div', {cls: 'row'}, [h('span', {cls: 'k', text: label}), h('span', {cls: 'v', text: value})]);
  }
  function descBlock(desc) {
    if (!desc) return null;
    var out = h('div', {cls: 'desc'}, [h('div', {cls: 'desc-text', text: desc.description})]);
    if (desc.contexts && desc.contexts.length) {
      var ul = h('ul', {cls: 'contexts'});
      desc.contexts.slice(0, 5).forEach(function (c) {
        ul.appendChild(h('li', {}, [c.value === null || c.value === undefined ? null : h('span', {cls: 'cv', text: fmt(c.value) + ' '}),
                                     h('span', {text: c.text})]));
      });
      out.appendChild(h('div', {cls: 'k', text: 'top contexts'}));
      out.appendChild(ul);
    }
    return out;
  }
  function edgeSummary(e) {  // one line for lists
    var up = nodeById[e.source];
    var s1 = (up ? up.view.name + (up.view.pos ? ' ' + up.view.pos : '') : e.source) + ' \u2192 ';
    var dn = nodeById[e.target];
    s1 += (dn ? dn.view.name + ' ' + dn.view.pos : e.target) + '  ' + e.side;
    if (e.sing && e.sing.length) s1 += ' [' + e.sing.join(', ') + ']';
    return s1 + '  w ' + fmt(e.weight);
  }

  function nodeTip(n) {
    var box = [];
    if (n.agg) {
      box.push(h('div', {cls: 'title', text: n.view.name + ' \u00b7 ' + KIND_NAME[n.kind] + ' (collapsed)'}));
      if (n.kind === 'mlp') box.push(row('layer', String(n.view.layer)));
      box.push(row('positions', n.members.map(function (m) { return tokLabel(m.dest); }).join(', ')));
      var outs = [];
      n.members.forEach(function (m) { outs = outs.concat(outEdges[m.id] || []); });
      box.push(row('edges out', String(outs.length)));
      return box;
    }
    var d = n.node;
    box.push(h('div', {cls: 'title', text: n.view.name + ' \u00b7 ' + KIND_NAME[n.kind]}));
    if (n.kind === 'head') {
      box.push(row('component', 'layer ' + d.layer + ', head ' + d.head));
      box.push(row('destination', tokLabel(d.dest)));
      box.push(row('source', tokLabel(d.src)));
      box.push(row('A_ds', fmt(d.A) + (typeof d.tau === 'number' ? '   (tau ' + fmt(d.tau) + ')' : '')));
      if (d.traced) {
        box.push(row('A_ds without', 'query signal ' + fmt(d.A_after_d) + ', key signal ' + fmt(d.A_after_s)));
        box.push(row('status', 'traced: its signals are drawn'));
      } else {
        box.push(row('status', 'not expanded (below tau, layer 0, position 0, or outside the trace)'));
      }
    } else if (n.kind === 'logits') {
      box.push(row('position', tokLabel(d.dest)));
      box.push(row('logit diff', fmt(meta.logit_diff)));
      if (meta.io !== undefined) box.push(row('answer', JSON.stringify(' ' + meta.io) + ' vs ' + JSON.stringify(' ' + meta.s)));
      else if (meta.correct !== undefined) box.push(row('token ids', 'correct ' + JSON.stringify(meta.correct) + ' vs wrong ' + JSON.stringify(meta.wrong)));
    } else {
      if (n.kind !== 'emb') box.push(row('component', 'layer ' + d.layer + (n.kind === 'offset' ? ', head ' + d.head : '')));
      box.push(row('position', tokLabel(d.dest)));
    }
    var ins = (inEdges[n.id] || []).slice().sort(function (a, b) { return absW(b) - absW(a); });
    var outs2 = outEdges[n.id] || [];
    if (ins.length || outs2.length) {
      var nd = ins.filter(function (e) { return e.side === 'd'; }).length;
      var ns = ins.filter(function (e) { return e.side === 's'; }).length;
      box.push(row('edges', 'in: ' + nd + ' query, ' + ns + ' key' + (ins.length - nd - ns ? ', ' + (ins.length - nd - ns) + ' seed' : '') +
                             '; out: ' + outs2.length));
    }
    if (ins.length) {
      var ul = h('ul', {cls: 'ins'});
      ins.slice(0, 5).forEach(function (e) {
        ul.appendChild(h('li', {}, [h('span', {text: edgeSummary(e)}),
                                     e.desc ? h('div', {cls: 'desc-text small', text: e.desc.description}) : null]));
      });
      box.push(h('div', {cls: 'k', text: 'strongest incoming'}));
      box.push(ul);
    }
    return box;
  }

  function edgeTip(e) {
    var box = [];
    if (e.members.length > 1 || e.members[0].id !== e.id) {
      box.push(h('div', {cls: 'title', text: e.source.replace('agg:', '') + ' \u2192 ' + e.target + ' (' + e.members.length + ' edges, collapsed)'}));
      box.push(row('side', SIDE_NAME[e.side]));
      box.push(row('total weight', fmt(e.weight)));
      var ul = h('ul', {cls: 'ins'});
      e.members.slice().sort(function (a, b) { return absW(b) - absW(a); }).slice(0, 8).forEach(function (m) {
        ul.appendChild(h('li', {}, [h('span', {text: edgeSummary(m)}),
                                     m.desc ? h('div', {cls: 'desc-text small', text: m.desc.description}) : null]));
      });
      box.push(ul);
      return box;
    }
    var x = e.members[0];
    box.push(h('div', {cls: 'title', text: x.source + ' \u2192 ' + x.target}));
    if (x.side === 'seed') {
      box.push(row('side', 'seed: a direct contribution to the logit difference'));
      box.push(row('contribution', fmt(x.weight)));
      return box;
    }
    box.push(row('side', x.side === 'd' ? 'query (d): read by the destination\u2019s query' : 'key (s): read by the source\u2019s key'));
    box.push(row('token', tokLabel(x.token)));
    box.push(row('singular dirs', (x.sing || []).join(', ') + '   (greedy order; rank ' + (x.rank !== undefined ? x.rank : (x.sing || []).length) + ')'));
    box.push(row('weight', fmt(x.weight) + '   (drop ' + fmt(x.drop) + ', attribution ' + fmt(x.attribution) + ')'));
    if (x.desc) box.push(descBlock(x.desc));
    return box;
  }

  function showTip(target, ev) {
    var tip = els.tip;
    tip.textContent = '';
    var parts = target.type === 'node' ? nodeTip(target.item) : edgeTip(target.item);
    parts.forEach(function (p) { if (p) tip.appendChild(p); });
    if (state.pinned) tip.appendChild(h('div', {cls: 'pinned-note', text: 'pinned \u2014 click the background or press Esc to unpin'}));
    tip.style.display = 'block';
    tip.classList.toggle('pinned', !!state.pinned);
    if (ev) placeTip(ev.clientX, ev.clientY);
    else {
      var el = els.svg.querySelector('[data-node="' + cssEscape(target.item.id) + '"]');
      if (el) { var r = el.getBoundingClientRect(); placeTip(r.right, r.bottom); }
    }
  }
  function placeTip(cx, cy) {
    var tip = els.tip, pad = 14;
    var w = tip.offsetWidth, hgt = tip.offsetHeight;
    var x = cx + pad, y = cy + pad;
    if (x + w > window.innerWidth - 4) x = Math.max(4, cx - w - pad);
    if (y + hgt > window.innerHeight - 4) y = Math.max(4, window.innerHeight - hgt - 4);
    tip.style.left = (x + window.scrollX) + 'px';
    tip.style.top = (y + window.scrollY) + 'px';
  }
  function moveTip(ev) { if (!state.pinned) placeTip(ev.clientX, ev.clientY); }
  function cssEscape(x) { return (window.CSS && CSS.escape) ? CSS.escape(x) : x.replace(/["\\]/g, '\\$&'); }

  function highlight(target) {
    var svg = els.svg;
    clearHighlight();
    if (!target) return;
    svg.classList.add('focus');
    var nodeIds = [], edgeIds = [], posD = [], posS = [];
    if (target.type === 'node') {
      var n = target.item;
      nodeIds.push(n.id);
      view.edges.forEach(function (e) {
        if (e.source === n.id || e.target === n.id) {
          edgeIds.push(e.id);
          nodeIds.push(e.source === n.id ? e.target : e.source);
        }
      });
      if (n.agg) n.members.forEach(function (m) { posD.push(m.dest); });
      else { posD.push(n.node.dest); if (n.kind === 'head') posS.push(n.node.src); }
    } else {
      var e = target.item;
      edgeIds.push(e.id);
      nodeIds.push(e.source, e.target);
      e.members.forEach(function (m) { if (typeof m.token === 'number') posD.push(m.token); });
    }
    nodeIds.forEach(function (id) {
      var el = svg.querySelector('[data-node="' + cssEscape(id) + '"]');
      if (el) el.classList.add('hl');
    });
    edgeIds.forEach(function (id) {
      var el = svg.querySelector('[data-edge="' + cssEscape(id) + '"]');
      if (el) el.classList.add('hl');
    });
    posD.forEach(function (p) { var t = els.tokens.querySelector('[data-pos="' + p + '"]'); if (t) t.classList.add('hl-d'); });
    posS.forEach(function (p) { var t = els.tokens.querySelector('[data-pos="' + p + '"]'); if (t) t.classList.add('hl-s'); });
    var rowsSel = target.type === 'edge' ? target.item.members.map(function (m) { return m.id; }) : [];
    Array.prototype.forEach.call(els.tbody.children, function (tr) {
      if (rowsSel.indexOf(tr.getAttribute('data-edge')) >= 0) tr.classList.add('hl');
    });
  }
  function clearHighlight() {
    if (els.svg) els.svg.classList.remove('focus');
    Array.prototype.forEach.call(document.querySelectorAll('.hl, .hl-d, .hl-s'), function (el) {
      el.classList.remove('hl', 'hl-d', 'hl-s');
    });
  }
  function hover(target, ev) {
    if (state.pinned) return;
    highlight(target);
    showTip(target, ev);
  }
  function unhover() {
    if (state.pinned) return;
    clearHighlight();
    els.tip.style.display = 'none';
  }
  function pin(target, ev) {
    state.pinned = target;
    highlight(target);
    showTip(target, ev);
  }
  function unpin() {
    state.pinned = null;
    clearHighlight();
    els.tip.style.display = 'none';
  }

  // -- tokens, controls, table ------------------------------------------------------------------------
  function drawTokens() {
    var used = {};
    nodes.forEach(function (n) {
      if (typeof n.dest === 'number' && n.dest >= 0) used[n.dest] = true;
      if (n.kind === 'head' && typeof n.src === 'number' && n.src >= 0) used[n.src] = true;
    });
    edges.forEach(function (e) { if (typeof e.token === 'number' && e.token >= 0) used[e.token] = true; });
    var box = els.tokens;
    box.textContent = '';
    if (!tokens) {
      box.appendChild(h('span', {cls: 'muted', text: 'tokens not given; positions used: ' +
        Object.keys(used).map(Number).sort(function (a, b) { return a - b; }).join(', ')}));
      return;
    }
    tokens.forEach(function (t, i) {
      var cls = 'tok' + (used[i] ? ' used' : '') + (i === meta.position ? ' answer' : '');
      box.appendChild(h('span', {cls: cls, 'data-pos': i, title: tokLabel(i)},
                        [h('sub', {text: String(i)}), h('span', {cls: 'tt', text: tokShort(i) || '\u2205'})]));
    });
  }

  var COLUMNS = [
    {key: 'source', label: 'upstream', get: function (e) { return e.source; }},
    {key: 'target', label: 'downstream', get: function (e) { return e.target; }},
    {key: 'side', label: 'side', get: function (e) { return e.side; }},
    {key: 'token', label: 'token', get: function (e) { return e.token; }, show: function (e) { return tokLabel(e.token); }},
    {key: 'sing', label: 'singular dirs (greedy order)', get: function (e) { return (e.sing || []).join(','); },
     show: function (e) { return (e.sing || []).join(', '); }},
    {key: 'rank', label: 'rank', get: function (e) { return e.rank; }},
    {key: 'weight', label: 'weight', get: function (e) { return e.weight; }, show: function (e) { return fmt(e.weight); }},
    {key: 'drop', label: 'drop', get: function (e) { return e.drop; }, show: function (e) { return fmt(e.drop); }},
    {key: 'attribution', label: 'attribution', get: function (e) { return e.attribution; },
     show: function (e) { return fmt(e.attribution); }},
    {key: 'desc', label: 'description', get: function (e) { return e.desc ? e.desc.description : ''; }}
  ];

  function drawTable() {
    var thead = els.thead;
    thead.textContent = '';
    var tr = h('tr');
    COLUMNS.forEach(function (c) {
      var arrow = state.sortKey === c.key ? (state.sortDir < 0 ? ' \u25bc' : ' \u25b2') : '';
      var th = h('th', {'data-key': c.key, title: 'sort by ' + c.label, text: c.label + arrow});
      th.addEventListener('click', function () {
        if (state.sortKey === c.key) state.sortDir = -state.sortDir;
        else { state.sortKey = c.key; state.sortDir = (c.key === 'weight' || c.key === 'drop' || c.key === 'attribution') ? -1 : 1; }
        drawTable();
      });
      tr.appendChild(th);
    });
    thead.appendChild(tr);
    var col = COLUMNS.filter(function (c) { return c.key === state.sortKey; })[0];
    var list = view.tableEdges.slice().sort(function (a, b) {
      var x = col.get(a), y = col.get(b);
      if (x === y) return 0;
      if (x === null || x === undefined) return 1;
      if (y === null || y === undefined) return -1;
      return (x < y ? -1 : 1) * state.sortDir;
    });
    var tbody = els.tbody;
    tbody.textContent = '';
    list.forEach(function (e) {
      var r = h('tr', {'data-edge': e.id, cls: 'side-' + e.side});
      COLUMNS.forEach(function (c) {
        var v = c.show ? c.show(e) : c.get(e);
        r.appendChild(h('td', {cls: 'c-' + c.key, text: v === null || v === undefined ? '' : String(v)}));
      });
      r.addEventListener('mouseenter', function () {
        if (state.pinned) return;
        var de = view.edges.filter(function (x) { return x.members.indexOf(e) >= 0; })[0];
        if (de) highlight({type: 'edge', item: de});
      });
      r.addEventListener('mouseleave', function () { if (!state.pinned) clearHighlight(); });
      tbody.appendChild(r);
    });
    els.tableCount.textContent = list.length + ' of ' + edges.length + ' edges shown';
  }

  function controls() {
    var lo = h('input', {type: 'range', min: -1, max: LMAX, step: 1, value: state.lo, id: 'layer-lo', 'aria-label': 'lowest layer'});
    var hi = h('input', {type: 'range', min: -1, max: LMAX, step: 1, value: state.hi, id: 'layer-hi', 'aria-label': 'highest layer'});
    var lab = h('span', {cls: 'range-label', id: 'layer-range-label'});
    var coll = h('input', {type: 'checkbox', id: 'collapse-leaves'});
    var minw = h('input', {type: 'number', min: 0, step: 0.01, value: 0, id: 'min-weight', 'aria-label': 'minimum edge weight'});
    var zoom = h('input', {type: 'range', min: 40, max: 150, step: 10, value: 100, id: 'zoom', 'aria-label': 'zoom'});
    var zlab = h('span', {cls: 'zoom-label', text: '100%'});
    zoom.addEventListener('input', function () {
      state.zoom = Number(zoom.value) / 100;
      zlab.textContent = zoom.value + '%';
      applyZoom();
    });
    function setLabel() { lab.textContent = 'layers ' + layerName(state.lo) + ' \u2013 ' + layerName(state.hi); }
    function onRange(which) {
      var a = Number(lo.value), b = Number(hi.value);
      if (a > b) { if (which === 'lo') hi.value = b = a; else lo.value = a = b; }
      state.lo = a; state.hi = b;
      setLabel();
      refresh();
    }
    lo.addEventListener('input', function () { onRange('lo'); });
    hi.addEventListener('input', function () { onRange('hi'); });
    coll.addEventListener('change', function () { state.collapse = coll.checked; refresh(); });
    minw.addEventListener('input', function () { var x = Number(minw.value); state.minWeight = isFinite(x) && x > 0 ? x : 0; refresh(); });
    setLabel();
    return h('div', {cls: 'controls'}, [
      h('label', {}, ['from ', lo]), h('label', {}, ['to ', hi]), lab,
      h('label', {cls: 'check'}, [coll, ' collapse MLP / embedding leaves (one node per layer)']),
      h('label', {}, ['min |weight| ', minw]),
      h('label', {}, ['zoom ', zoom, zlab])
    ]);
  }

  function legend() {
    function item(cls, text) { return h('span', {cls: 'lg ' + cls, text: text}); }
    return h('div', {cls: 'legend'}, [
      item('lg-d', 'query side (d)'), item('lg-s', 'key side (s)'), item('lg-seed', 'seed \u2192 logits'),
      item('lg-head', 'A l.h head firing (dest\u2190src)'), item('lg-untraced', 'firing not expanded'),
      item('lg-mlp', 'M l MLP'), item('lg-emb', 'E embedding'), item('lg-bias', 'B / O bias, offset'),
      h('span', {cls: 'muted', text: 'rows: token positions; columns: layers. Hover for details, click to pin.'})
    ]);
  }

  function header() {
    var bits = [];
    if (meta.model) bits.push('model ' + meta.model);
    if (typeof meta.logit_diff === 'number') bits.push('logit diff ' + fmt(meta.logit_diff));
    bits.push(nodes.length + ' nodes, ' + edges.length + ' edges');
    if (typeof meta.n_firings === 'number') bits.push(meta.n_firings + ' firings traced');
    if (meta.variant) bits.push('variant ' + meta.variant);
    if (DATA.descriptions && DATA.descriptions.given) bits.push(DATA.descriptions.matched + ' of ' + DATA.descriptions.given + ' signal descriptions matched');
    if (meta.truncated) bits.push('TRUNCATED trace');
    return h('header', {}, [h('h1', {text: DATA.title}), meta.text ? h('div', {cls: 'prompt', text: meta.text}) : null,
                            h('div', {cls: 'muted', text: bits.join(' \u00b7 ')})]);
  }

  function refresh() {
    state.pinned = null;
    els.tip.style.display = 'none';
    clearHighlight();
    view = buildView();
    drawGraph();
    drawTable();
  }

  function init() {
    var root = document.getElementById('accpp-viewer');
    root.textContent = '';
    els.tokens = h('div', {cls: 'tokens', id: 'tokens'});
    els.graph = h('div', {cls: 'graph-wrap', id: 'graph'});
    els.thead = h('thead');
    els.tbody = h('tbody');
    els.tableCount = h('div', {cls: 'muted'});
    els.tip = h('div', {cls: 'tip', id: 'tip', role: 'tooltip'});
    root.appendChild(header());
    root.appendChild(els.tokens);
    root.appendChild(controls());
    root.appendChild(legend());
    root.appendChild(els.graph);
    root.appendChild(h('h2', {text: 'Edges'}));
    root.appendChild(els.tableCount);
    root.appendChild(h('div', {cls: 'table-wrap'}, [h('table', {cls: 'edges', id: 'edge-table'}, [els.thead, els.tbody])]));
    document.body.appendChild(els.tip);
    document.addEventListener('keydown', function (ev) { if (ev.key === 'Escape') unpin(); });
    drawTokens();
    refresh();
    document.body.setAttribute('data-ready', '1');
  }

  init();
})();

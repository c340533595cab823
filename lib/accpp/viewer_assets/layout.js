/* ACC++ circuit viewer, part 3 of 5: the two layouts.
 *
 * "layers across": x = one column per layer used (embedding at the left, logits at the right),
 *   y = one band per token position used; inside a band a layer's nodes stack (bias offset, heads,
 *   output bias, MLP). Query-side edges run within a band, key-side edges between bands; an edge
 *   that skips layers runs along a lane at the top of its target's band and turns in the gaps
 *   between columns, so no edge crosses a node.
 * "tokens across, layers up" (compact): x = one column per token position used, y = one row per
 *   layer used, the embedding at the bottom and the logits at the top; a cell's nodes stack in it.
 *   Edges rise from a node's top to the next node's bottom. Wide graphs (many layers) take this one
 *   by default: it is as wide as the positions the circuit uses, not the layers.
 * Collapsed leaves (one node per MLP layer, one embedding) and closed groups whose members lie at
 * several positions go to a band (a column, in the compact layout) of their own. */

var L1 = {NODE_W: 58, NODE_H: 26, ROW_H: 31, COL_W: 82, BAND_GAP: 10, LANE: 3.5, LEFT: 140, TOP: 26};
var L2 = {NODE_W: 48, NODE_H: 26, CELL_W: 54, ROW_H: 31, GAP: 6, LEFT: 52, TOP: 36};
var AGG_BAND = 'agg', GROUP_BAND = 'grp';

function bandOf(n) {
  if (n.agg) return AGG_BAND;
  if (n.group) return n.dest === null ? GROUP_BAND : n.dest;
  return n.node.dest;
}
function bandOrder(a, b) {
  var rank = function (x) { return x === AGG_BAND ? 2 : (x === GROUP_BAND ? 1 : 0); };
  return (rank(a) - rank(b)) || (rank(a) ? 0 : a - b);
}
function srcOf(n) { return n.agg || n.group ? 0 : n.node.src; }
function cellSort(a, b) {
  return (a.view.sub - b.view.sub) || (srcOf(a) - srcOf(b)) || (a.id < b.id ? -1 : 1);
}

function layoutLayers(v) {
  var P = L1, cols = [];
  v.nodes.forEach(function (n) { if (cols.indexOf(n.view.col) < 0) cols.push(n.view.col); });
  cols.sort(function (a, b) { return a - b; });
  var colIdx = {}, colX = {};
  cols.forEach(function (c, i) { colIdx[c] = i; colX[c] = i * P.COL_W + P.COL_W / 2 + 4; });
  var bands = [], cells = {};
  v.nodes.forEach(function (n) {
    var b = bandOf(n);
    if (bands.indexOf(b) < 0) bands.push(b);
    var k = b + ':' + n.view.col;
    (cells[k] = cells[k] || []).push(n);
  });
  bands.sort(bandOrder);
  var rows = {};
  Object.keys(cells).forEach(function (k) {
    cells[k].sort(cellSort);
    var band = bandOf(cells[k][0]);
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
  var laneOf = {}, nLanes = {}, byBand = {};
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
    bandH[b] = 4 + (nLanes[b] || 0) * P.LANE + Math.max(1, rows[b] || 0) * P.ROW_H + 4;
    y += bandH[b] + P.BAND_GAP;
  });
  var pos = {};
  Object.keys(cells).forEach(function (k) {
    cells[k].forEach(function (n, i) {
      var b = bandOf(n);
      pos[n.id] = {x: colX[n.view.col], y: laneTop[b] + (nLanes[b] || 0) * P.LANE + i * P.ROW_H + P.ROW_H / 2};
    });
  });
  var routes = {};
  v.edges.forEach(function (e) {
    var a = pos[e.source], b = pos[e.target];
    var x1 = a.x + P.NODE_W / 2, y1 = a.y, x2 = b.x - P.NODE_W / 2 - 1, y2 = b.y;
    if (laneOf[e.id] === undefined) {
      var dx = Math.max(8, (x2 - x1) / 2);
      routes[e.id] = 'M ' + x1 + ' ' + y1 + ' C ' + (x1 + dx) + ' ' + y1 + ', ' + (x2 - dx) + ' ' + y2 + ', ' + x2 + ' ' + y2;
      return;
    }
    var lane = laneOf[e.id], gap = P.COL_W - P.NODE_W;
    var ly = laneTop[nodeBand[e.target]] + lane * P.LANE + P.LANE / 2;
    var off = 3 + (lane % 6) * (gap - 8) / 6;
    var xg1 = x1 + off, xg2 = x2 - gap + 2 + off;
    routes[e.id] = rounded([[x1, y1], [xg1, y1], [xg1, ly], [xg2, ly], [xg2, y2], [x2, y2]], 9);
  });
  // what the panes draw: column labels (layers) along the top, band labels (positions) down the left
  var colLabels = cols.map(function (c) { return {x: colX[c], text: colName(c)}; });
  var rowLabels = bands.map(function (b, i) {
    return {y: bandTop[b] - P.BAND_GAP / 2, h: bandH[b] + P.BAND_GAP, odd: i % 2 === 1, key: b,
            answer: b === meta.position, special: b === AGG_BAND || b === GROUP_BAND,
            pos: typeof b === 'number' ? String(b) : '', text: b === AGG_BAND ? 'collapsed leaves' :
              (b === GROUP_BAND ? 'groups' : tokShort(b)), title: typeof b === 'number' ? tokLabel(b) : ''};
  });
  return {kind: 'layers', P: P, pos: pos, routes: routes, colLabels: colLabels, rowLabels: rowLabels, colBands: [],
          guides: colLabels.map(function (c) { return c.x; }), width: cols.length * P.COL_W + 8 + 24,
          height: Math.max(y, 40), left: P.LEFT, top: P.TOP, corner: 'position \\ layer'};
}

function layoutTokens(v) {
  var P = L2, colKeys = [], rowKeys = [], cells = {};
  v.nodes.forEach(function (n) {
    var c = bandOf(n), r = n.view.col;
    if (colKeys.indexOf(c) < 0) colKeys.push(c);
    if (rowKeys.indexOf(r) < 0) rowKeys.push(r);
    var k = c + ':' + r;
    (cells[k] = cells[k] || []).push(n);
  });
  colKeys.sort(bandOrder);
  rowKeys.sort(function (a, b) { return b - a; });  // logits at the top, the embedding at the bottom
  var per = {}, depth = {}, most = {};
  Object.keys(cells).forEach(function (k) { cells[k].sort(cellSort); });
  colKeys.forEach(function (c) {
    per[c] = 1;
    most[c] = Math.max.apply(null, rowKeys.map(function (r) { return (cells[c + ':' + r] || []).length; }));
  });
  // one node per row of a cell; where the frame leaves room, the fullest columns take two side by side
  var width = colKeys.length * (P.CELL_W + P.GAP) + 8, room = frameWidth() - P.LEFT;
  colKeys.slice().sort(function (a, b) { return most[b] - most[a]; }).forEach(function (c) {
    if (most[c] > 1 && width + P.CELL_W <= room) { per[c] = 2; width += P.CELL_W; }
  });
  rowKeys.forEach(function (r) {
    depth[r] = Math.max.apply(null, colKeys.map(function (c) {
      return Math.ceil((cells[c + ':' + r] || []).length / per[c]);
    }).concat([1]));
  });
  var colX = {}, colW = {}, x = 4;
  colKeys.forEach(function (c) { colX[c] = x; colW[c] = per[c] * P.CELL_W + P.GAP; x += colW[c]; });
  var rowY = {}, rowH = {}, y = 4;
  rowKeys.forEach(function (r) { rowY[r] = y; rowH[r] = depth[r] * P.ROW_H + P.GAP; y += rowH[r]; });
  var pos = {};
  Object.keys(cells).forEach(function (k) {
    cells[k].forEach(function (n, i) {
      var c = bandOf(n), r = n.view.col, slot = i % per[c], sub = Math.floor(i / per[c]);
      pos[n.id] = {x: colX[c] + P.GAP / 2 + slot * P.CELL_W + P.CELL_W / 2,
                   y: rowY[r] + P.GAP / 2 + (depth[r] - 1 - sub) * P.ROW_H + P.ROW_H / 2};
    });
  });
  var routes = {};
  v.edges.forEach(function (e) {
    var a = pos[e.source], b = pos[e.target];
    var x1 = a.x, y1 = a.y - P.NODE_H / 2, x2 = b.x, y2 = b.y + P.NODE_H / 2 + 1;
    var dy = Math.max(10, (y1 - y2) / 2);
    var bow = Math.abs(x2 - x1) < 1 ? Math.min(P.CELL_W / 2, 6 + (y1 - y2) / 40) : 0;  // up a column: bow aside
    routes[e.id] = 'M ' + x1 + ' ' + y1 + ' C ' + (x1 + bow) + ' ' + (y1 - dy) + ', ' + (x2 + bow) + ' ' + (y2 + dy) +
                   ', ' + x2 + ' ' + y2;
  });
  var colLabels = colKeys.map(function (c) {
    var mid = colX[c] + colW[c] / 2, chars = Math.max(3, Math.floor((colW[c] - 4) / 6.6));
    return {x: mid, key: c, pos: typeof c === 'number' ? String(c) : '', answer: c === meta.position,
            text: c === AGG_BAND ? 'leaves' : (c === GROUP_BAND ? 'groups' : tokShort(c, chars)),
            title: typeof c === 'number' ? tokLabel(c) : ''};
  });
  var rowLabels = rowKeys.map(function (r, i) {
    return {y: rowY[r], h: rowH[r], odd: i % 2 === 1, key: r, answer: false, special: false, pos: '', text: colName(r), title: ''};
  });
  var colBands = colKeys.map(function (c) { return {x: colX[c], w: colW[c], answer: c === meta.position,
                                                    special: c === AGG_BAND || c === GROUP_BAND}; });
  return {kind: 'tokens', P: P, pos: pos, routes: routes, colLabels: colLabels, rowLabels: rowLabels, colBands: colBands,
          guides: [], width: x + 4, height: Math.max(y + 4, 40), left: P.LEFT, top: P.TOP, corner: 'layer \\ position'};
}

function chooseLayout(v) {  // the reader's choice, or the compact layout when the graph is wider than its frame
  if (state.layout === 'layers') return layoutLayers(v);
  if (state.layout === 'tokens') return layoutTokens(v);
  var wide = layoutLayers(v);
  var room = frameWidth();
  if (wide.width + wide.left <= room) return wide;
  var compact = layoutTokens(v);
  return compact.width + compact.left < wide.width + wide.left ? compact : wide;
}

function frameWidth() {  // the graph's frame, in the drawing's units (before the zoom)
  return (els.graph && els.graph.clientWidth ? els.graph.clientWidth : window.innerWidth) / state.zoom;
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
function colName(c) {
  if (c < 0) return 'E';
  if (c >= LMAX) return 'logits';
  return 'L' + c;
}

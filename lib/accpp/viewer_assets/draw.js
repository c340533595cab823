/* ACC++ circuit viewer, part 4 of 5: drawing the graph (four panes: corner, column labels that stay
 * at the top, row labels that stay at the left, the graph), the tooltip and highlighting. */

function clip(text, most) { return text.length > most ? text.slice(0, most - 1) + '\u2026' : text; }

function drawRowLabels(svg, L, width, withText) {
  L.rowLabels.forEach(function (r) {
    svg.appendChild(s('rect', {x: 0, y: r.y, width: width, height: r.h,
                               cls: 'band' + (r.odd ? ' odd' : '') + (r.answer ? ' answer' : '') + (r.special ? ' aggband' : '')}));
    if (!withText) return;
    var lab = s('text', {x: 8, y: r.y + r.h / 2 + 4, cls: 'band-label', 'data-pos': r.key});
    if (r.pos) lab.appendChild(s('tspan', {cls: 'band-pos', text: r.pos + ' '}));
    lab.appendChild(s('tspan', {text: r.text}));
    if (r.title) lab.appendChild(s('title', {text: r.title}));
    svg.appendChild(lab);
  });
}

function nodeLabel(n, L) {
  var name = n.group ? clip(n.view.name, L.kind === 'tokens' ? 7 : 9) : n.view.name;
  var pos = n.view.pos;
  if (L.kind === 'tokens' && !n.agg && !n.group) {  // the column gives the destination
    pos = n.kind === 'head' ? '\u2190' + n.node.src : '';
  }
  return {name: name, pos: pos};
}

function drawGraph() {
  var v = view, L = chooseLayout(v), P = L.P;
  view.layout = L;
  document.body.setAttribute('data-layout', L.kind);
  if (els.layoutNote) els.layoutNote.textContent = state.layout === 'auto' ? '(auto: ' + LAYOUT_NAME[L.kind] + ')' : '';
  var corner = s('svg', {width: L.left, height: L.top, cls: 'pane corner'});
  corner.appendChild(s('text', {x: 6, y: L.top - 10, cls: 'corner-label', text: L.corner}));
  var head = s('svg', {width: L.width, height: L.top, cls: 'pane colhead'});
  L.colLabels.forEach(function (c) {
    if (L.kind === 'tokens') {
      var t = s('text', {x: c.x, y: L.top - 20, cls: 'col-label col-pos' + (c.answer ? ' answer' : ''), text: c.pos || ' '});
      var t2 = s('text', {x: c.x, y: L.top - 7, cls: 'col-label col-tok' + (c.answer ? ' answer' : ''), 'data-pos': c.key,
                          text: c.text});
      if (c.title) t2.appendChild(s('title', {text: c.title}));
      head.appendChild(t);
      head.appendChild(t2);
    } else {
      head.appendChild(s('text', {x: c.x, y: L.top - 10, cls: 'col-label', text: c.text}));
    }
  });
  var side = s('svg', {width: L.left, height: L.height, cls: 'pane rowhead'});
  drawRowLabels(side, L, L.left, true);
  var svg = s('svg', {width: L.width, height: L.height, cls: 'graph layout-' + L.kind, role: 'img', 'aria-label': 'circuit graph'});
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
  drawRowLabels(svg, L, L.width, false);
  L.colBands.forEach(function (c) {
    if (c.answer || c.special) svg.appendChild(s('rect', {x: c.x, y: 0, width: c.w, height: L.height,
                                                          cls: 'colband' + (c.answer ? ' answer' : ' aggband')}));
  });
  L.guides.forEach(function (x) { svg.appendChild(s('line', {x1: x, x2: x, y1: 0, y2: L.height, cls: 'col-guide'})); });
  if (!v.nodes.length) svg.appendChild(s('text', {x: 10, y: 30, cls: 'empty', text: 'no node in this layer range'}));
  var wmax = {sig: 0, seed: 0};
  v.edges.forEach(function (e) {
    var k = e.side === 'seed' ? 'seed' : 'sig';
    wmax[k] = Math.max(wmax[k], Math.abs(e.weight));
  });
  var gEdges = s('g', {cls: 'edges'});
  v.edges.slice().sort(function (a, b) { return Math.abs(a.weight) - Math.abs(b.weight); }).forEach(function (e) {
    var d = L.routes[e.id];
    var f = Math.sqrt(Math.abs(e.weight) / (wmax[e.side === 'seed' ? 'seed' : 'sig'] || 1));  // 0..1
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
    var p = L.pos[n.id], lab = nodeLabel(n, L);
    var cls = 'node kind-' + n.kind + (n.agg ? ' agg' : '') + (n.group ? ' group' : '') +
              (n.inGroup !== null && n.inGroup !== undefined ? ' in-group' : '') +
              (!n.agg && !n.group && n.kind === 'head' && !n.node.traced ? ' untraced' : '');
    var g = s('g', {cls: cls, 'data-node': n.id, transform: 'translate(' + p.x + ',' + p.y + ')', tabindex: 0});
    g.appendChild(s('rect', {x: -P.NODE_W / 2, y: -P.NODE_H / 2, width: P.NODE_W, height: P.NODE_H, rx: 5}));
    g.appendChild(s('text', {y: lab.pos ? -1.5 : 4, cls: 'nm', text: lab.name}));
    if (lab.pos) g.appendChild(s('text', {y: 9.5, cls: 'ps', text: lab.pos}));
    g.addEventListener('mouseenter', function (ev) { hover({type: 'node', item: n}, ev); });
    g.addEventListener('mousemove', moveTip);
    g.addEventListener('mouseleave', unhover);
    g.addEventListener('click', function (ev) {
      ev.stopPropagation();
      if (ev.shiftKey || ev.ctrlKey || ev.metaKey) toggleSelect(n); else pin({type: 'node', item: n}, ev);
    });
    g.addEventListener('focus', function () { hover({type: 'node', item: n}, null); });
    g.addEventListener('blur', unhover);
    gNodes.appendChild(g);
  });
  svg.appendChild(gNodes);
  bg.addEventListener('click', unpin);
  var grid = h('div', {cls: 'graph-grid'});
  grid.style.gridTemplateColumns = L.left + 'px ' + L.width + 'px';
  grid.style.gridTemplateRows = L.top + 'px ' + L.height + 'px';
  [corner, head, side, svg].forEach(function (x) { grid.appendChild(x); });
  els.graph.textContent = '';
  els.graph.appendChild(grid);
  els.svg = svg;
  els.grid = grid;
  applyZoom();
  markSelection();
}
function applyZoom() { if (els.grid) els.grid.style.zoom = String(state.zoom); }

// -- search and selection marks ---------------------------------------------------------------------
function applySearch(scroll) {
  var found = searchMatches(view);
  var svg = els.svg;
  svg.classList.toggle('searching', found.active);
  Array.prototype.forEach.call(svg.querySelectorAll('.match'), function (el) { el.classList.remove('match'); });
  found.nodes.forEach(function (id) {
    var el = svg.querySelector('[data-node="' + cssEscape(id) + '"]');
    if (el) el.classList.add('match');
  });
  found.edges.forEach(function (id) {
    var el = svg.querySelector('[data-edge="' + cssEscape(id) + '"]');
    if (el) el.classList.add('match');
  });
  view.matches = found;
  if (els.searchCount) {
    els.searchCount.textContent = found.active ? found.nodes.length + ' node' + (found.nodes.length === 1 ? '' : 's') +
      ', ' + found.edges.length + ' edge' + (found.edges.length === 1 ? '' : 's') + ' match' : '';
  }
  if (scroll && found.nodes.length) {
    var first = svg.querySelector('[data-node="' + cssEscape(found.nodes[0]) + '"]');
    if (first && first.scrollIntoView) first.scrollIntoView({block: 'nearest', inline: 'center'});
  }
}
function isSelected(d) { return membersOf(d).every(function (m) { return state.selected[m.id]; }); }
function toggleSelect(d) {
  var on = !isSelected(d);
  membersOf(d).forEach(function (m) { if (on) state.selected[m.id] = true; else delete state.selected[m.id]; });
  markSelection();
}
function markSelection() {
  if (!els.svg) return;
  view.nodes.forEach(function (d) {
    var el = els.svg.querySelector('[data-node="' + cssEscape(d.id) + '"]');
    if (el) el.classList.toggle('selected', isSelected(d));
  });
  if (els.selCount) {
    var n = Object.keys(state.selected).length;
    els.selCount.textContent = n + ' node' + (n === 1 ? '' : 's') + ' selected';
    els.groupMake.disabled = n < 1;
  }
}

// -- tooltip --------------------------------------------------------------------------------------
function row(label, value) {
  return h('div', {cls: 'row'}, [h('span', {cls: 'k', text: label}), h('span', {cls: 'v', text: value})]);
}
function edgeSummary(e) {  // one line for lists
  var up = nodeById[e.source];
  var s1 = (up ? up.view.name + (up.view.pos ? ' ' + up.view.pos : '') : e.source) + ' \u2192 ';
  var dn = nodeById[e.target];
  s1 += (dn ? dn.view.name + ' ' + dn.view.pos : e.target) + '  ' + e.side;
  if (e.sing && e.sing.length) s1 += ' [' + e.sing.join(', ') + ']';
  return s1 + '  w ' + fmt(e.weight);
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
    var sel = target.type === 'node' ? '[data-node="' : '[data-edge="';
    var el = els.svg.querySelector(sel + cssEscape(target.item.id) + '"]');
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
    if (n.agg || n.group) n.members.forEach(function (m) { posD.push(m.dest); });
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
  writeHash();
}
function unpin() {
  var was = !!state.pinned;
  state.pinned = null;
  clearHighlight();
  els.tip.style.display = 'none';
  if (was) writeHash();
}

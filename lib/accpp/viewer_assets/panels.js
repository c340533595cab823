/* ACC++ circuit viewer, part 5 of 5: what the tooltip says, the header, tokens, controls (filters,
 * layout, search, groups, a link to the view), legend and edge table; then the page starts. */
var LAYOUT_NAME = {layers: 'layers across', tokens: 'tokens across, layers up'};

// -- descriptions: shown only with their judge score; "not informative" when a describer's check failed --
function scoreText(sc) {
  if (typeof sc === 'number') return 'judge score ' + fmt(sc);
  return 'judge: ' + fmt(sc.own) + ' with this description vs ' + fmt(sc.other) + ' with another signal\u2019s' +
         ' (balanced accuracy, held-out top contexts vs random)';
}
function failedChecks(d) { return (d.checks || []).filter(function (c) { return !c.passed; }); }
function oneDescription(d, small) {
  if (d.score === undefined || d.score === null) {
    return h('div', {cls: 'desc-withheld', text: 'a description ' + (d.describer ? 'by ' + d.describer + ' ' : '') +
                     'was given without a judge score; not shown'});
  }
  var failed = failedChecks(d);
  var box = h('div', {cls: 'desc-one' + (failed.length ? ' uninformative' : '')});
  var head = [];
  if (failed.length) head.push(h('span', {cls: 'badge', text: 'not informative'}));
  if (d.describer) head.push(h('span', {cls: 'k', text: d.describer}));
  if (head.length) box.appendChild(h('div', {cls: 'desc-head'}, head));
  box.appendChild(h('div', {cls: 'desc-text' + (small ? ' small' : ''), text: d.description}));
  box.appendChild(h('div', {cls: 'desc-score', text: scoreText(d.score)}));
  failed.forEach(function (c) { box.appendChild(h('div', {cls: 'desc-check', text: 'failed: ' + c.check})); });
  return box;
}
function descBlock(desc) {
  if (!desc) return null;
  var out = h('div', {cls: 'desc'}, [oneDescription(desc, false)]);
  (desc.others || []).forEach(function (o) { out.appendChild(oneDescription(o, true)); });
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
function descLine(desc) {  // the edge table's and the node lists' short form
  if (!desc || desc.score === undefined || desc.score === null) return '';
  var sc = typeof desc.score === 'number' ? fmt(desc.score) : fmt(desc.score.own) + ' vs ' + fmt(desc.score.other);
  return (failedChecks(desc).length ? '[not informative] ' : '') + desc.description + ' (judge ' + sc + ')';
}

function nodeTip(n) {
  var box = [];
  if (n.agg || n.group) {
    box.push(h('div', {cls: 'title', text: n.view.name + ' \u00b7 ' + (n.group ? 'group of ' + n.members.length + ' nodes' :
                                                                       KIND_NAME[n.kind] + ' (collapsed)')}));
    if (n.agg && n.kind === 'mlp') box.push(row('layer', String(n.view.layer)));
    if (n.group) box.push(row('members', n.members.map(function (m) { return m.view.name + (m.view.pos ? ' ' + m.view.pos : ''); }).join(', ')));
    box.push(row('positions', n.members.map(function (m) { return tokLabel(m.dest); }).filter(function (x, i, a) {
      return a.indexOf(x) === i; }).join(', ')));
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
  if (n.inGroup !== null && n.inGroup !== undefined) box.push(row('group', state.groups[n.inGroup].name + ' (opened)'));
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
      var line = descLine(e.desc);
      ul.appendChild(h('li', {}, [h('span', {text: edgeSummary(e)}), line ? h('div', {cls: 'desc-text small', text: line}) : null]));
    });
    box.push(h('div', {cls: 'k', text: 'strongest incoming'}));
    box.push(ul);
  }
  return box;
}

function edgeTip(e) {
  var box = [];
  if (e.members.length > 1 || e.members[0].id !== e.id) {
    box.push(h('div', {cls: 'title', text: displayName(e.source) + ' \u2192 ' + displayName(e.target) + ' (' +
                                            e.members.length + ' edges, merged)'}));
    box.push(row('side', SIDE_NAME[e.side]));
    box.push(row('total weight', fmt(e.weight)));
    var ul = h('ul', {cls: 'ins'});
    e.members.slice().sort(function (a, b) { return absW(b) - absW(a); }).slice(0, 8).forEach(function (m) {
      var line = descLine(m.desc);
      ul.appendChild(h('li', {}, [h('span', {text: edgeSummary(m)}), line ? h('div', {cls: 'desc-text small', text: line}) : null]));
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

// -- tokens, controls, groups, table ----------------------------------------------------------------
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
  {key: 'desc', label: 'description (judge score)', get: function (e) { return descLine(e.desc); }}
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

function drawGroups() {
  var list = els.groupList;
  list.textContent = '';
  state.groups.forEach(function (g, gi) {
    var toggle = h('button', {type: 'button', cls: 'group-toggle', text: g.open ? 'collapse' : 'expand'});
    toggle.addEventListener('click', function () { g.open = !g.open; refresh(); });
    var drop = h('button', {type: 'button', cls: 'group-remove', text: 'ungroup'});
    drop.addEventListener('click', function () { state.groups.splice(gi, 1); refresh(); });
    list.appendChild(h('li', {'data-group': gi}, [h('span', {cls: 'group-name', text: g.name}),
      h('span', {cls: 'muted', text: ' ' + g.members.length + ' nodes' + (g.open ? ', opened ' : ' ')}), toggle, drop]));
  });
}

function controls() {
  var lo = h('input', {type: 'range', min: -1, max: LMAX, step: 1, value: state.lo, id: 'layer-lo', 'aria-label': 'lowest layer'});
  var hi = h('input', {type: 'range', min: -1, max: LMAX, step: 1, value: state.hi, id: 'layer-hi', 'aria-label': 'highest layer'});
  var lab = h('span', {cls: 'range-label', id: 'layer-range-label'});
  var coll = h('input', {type: 'checkbox', id: 'collapse-leaves'});
  coll.checked = state.collapse;
  var minw = h('input', {type: 'number', min: 0, step: 0.01, value: state.minWeight, id: 'min-weight', 'aria-label': 'minimum edge weight'});
  var zoom = h('input', {type: 'range', min: 40, max: 150, step: 10, value: Math.round(state.zoom * 100), id: 'zoom', 'aria-label': 'zoom'});
  var zlab = h('span', {cls: 'zoom-label', text: Math.round(state.zoom * 100) + '%'});
  var layout = h('select', {id: 'layout', 'aria-label': 'layout'}, [
    h('option', {value: 'auto', text: 'auto'}), h('option', {value: 'layers', text: LAYOUT_NAME.layers}),
    h('option', {value: 'tokens', text: LAYOUT_NAME.tokens})]);
  layout.value = state.layout;
  els.layoutNote = h('span', {cls: 'muted', id: 'layout-note'});
  var search = h('input', {type: 'search', id: 'search', value: state.query, 'aria-label': 'search',
                           placeholder: 'token, L5, A5.3, M12, description'});
  els.searchCount = h('span', {cls: 'muted', id: 'search-count'});
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
  zoom.addEventListener('input', function () {
    state.zoom = Number(zoom.value) / 100;
    zlab.textContent = zoom.value + '%';
    applyZoom();
    writeHash();
  });
  layout.addEventListener('change', function () { state.layout = layout.value; refresh(); });
  search.addEventListener('input', function () { state.query = search.value; applySearch(false); writeHash(); });
  search.addEventListener('keydown', function (ev) { if (ev.key === 'Enter') applySearch(true); });
  setLabel();
  return h('div', {cls: 'controls'}, [
    h('label', {}, ['from ', lo]), h('label', {}, ['to ', hi]), lab,
    h('label', {cls: 'check'}, [coll, ' collapse MLP / embedding leaves (one node per layer)']),
    h('label', {}, ['min |weight| ', minw]),
    h('label', {}, ['zoom ', zoom, zlab]),
    h('label', {}, ['layout ', layout, els.layoutNote]),
    h('label', {}, ['search ', search, els.searchCount])
  ]);
}

function groupControls() {
  els.selCount = h('span', {cls: 'muted', id: 'selection-count'});
  var name = h('input', {type: 'text', id: 'group-name', placeholder: 'group name', 'aria-label': 'group name', maxlength: 80});
  els.groupMake = h('button', {type: 'button', id: 'group-make', text: 'group the selected nodes'});
  els.groupMake.addEventListener('click', function () {
    var ids = Object.keys(state.selected);
    if (!ids.length) return;
    addGroup(name.value, ids, false);
    name.value = '';
    state.selected = {};
    refresh();
  });
  var fromSearch = h('button', {type: 'button', id: 'select-matches', text: 'select the search matches'});
  fromSearch.addEventListener('click', function () {
    (view.matches ? view.matches.nodes : []).forEach(function (id) {
      membersOf(view.byId[id]).forEach(function (m) { state.selected[m.id] = true; });
    });
    markSelection();
  });
  var clear = h('button', {type: 'button', id: 'select-clear', text: 'clear'});
  clear.addEventListener('click', function () { state.selected = {}; markSelection(); });
  els.groupList = h('ul', {cls: 'group-list', id: 'group-list'});
  els.link = h('input', {type: 'text', id: 'view-link', readonly: 'readonly', 'aria-label': 'link to this view'});
  els.link.style.display = 'none';
  var linkBtn = h('button', {type: 'button', id: 'view-link-button', text: 'link to this view'});
  linkBtn.addEventListener('click', function () {
    els.link.style.display = els.link.style.display === 'none' ? '' : 'none';
    els.link.value = linkText();
    if (els.link.style.display !== 'none') els.link.select();
  });
  els.tools = h('details', {cls: 'tools', id: 'tools'}, [
    h('summary', {text: 'groups and a link to this view'}),
    h('div', {cls: 'controls groups'}, [
      h('span', {cls: 'muted', text: 'shift- or ctrl-click nodes to select them'}), els.selCount, name, els.groupMake,
      fromSearch, clear]),
    h('div', {cls: 'controls groups'}, [els.groupList, linkBtn, els.link])]);
  if (state.groups.length) els.tools.open = true;
  return els.tools;
}

function legend() {
  function item(cls, text) { return h('span', {cls: 'lg ' + cls, text: text}); }
  return h('div', {cls: 'legend'}, [
    item('lg-d', 'query side (d)'), item('lg-s', 'key side (s)'), item('lg-seed', 'seed \u2192 logits'),
    item('lg-head', 'A l.h head firing (dest\u2190src)'), item('lg-untraced', 'firing not expanded'),
    item('lg-mlp', 'M l MLP'), item('lg-emb', 'E embedding'), item('lg-bias', 'B / O bias, offset'),
    item('lg-group', 'your group'),
    h('span', {cls: 'muted', text: 'Hover for details, click to pin.'})
  ]);
}

function header() {
  var bits = [];
  if (meta.model) bits.push('model ' + meta.model);
  if (typeof meta.logit_diff === 'number') bits.push('logit diff ' + fmt(meta.logit_diff));
  bits.push(nodes.length + ' nodes, ' + edges.length + ' edges');
  if (typeof meta.n_firings === 'number') bits.push(meta.n_firings + ' firings traced');
  if (meta.variant) bits.push('variant ' + meta.variant);
  if (meta.truncated) bits.push('TRUNCATED trace');
  var d = DATA.descriptions, described = null;
  if (d && d.given) {
    described = h('div', {cls: 'muted described', id: 'described',
      text: 'Signal descriptions: ' + d.matched + ' of the ' + d.given + ' described signals are signals of this circuit ' +
            '(an edge here with the same upstream component, head, side and singular directions); the other ' +
            (d.given - d.matched) + ' are not in this circuit. A description is shown with its judge score only, ' +
            'and marked \u201cnot informative\u201d where its describer\u2019s own check failed.'});
  }
  // the prompt, unless the title already shows it
  var prompt = meta.text && DATA.title.indexOf(String(meta.text)) < 0 ? h('div', {cls: 'prompt', text: meta.text}) : null;
  return h('header', {}, [h('h1', {text: DATA.title}), prompt, h('div', {cls: 'muted', text: bits.join(' \u00b7 ')}), described]);
}

function refresh() {
  state.pinned = null;
  els.tip.style.display = 'none';
  clearHighlight();
  view = buildView();
  drawGraph();
  applySearch(false);
  drawTable();
  drawGroups();
  writeHash();
}

function init() {
  initTheme();
  var restored = readHash();
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
  root.appendChild(groupControls());
  root.appendChild(legend());
  root.appendChild(els.graph);
  root.appendChild(h('h2', {text: 'Edges'}));
  root.appendChild(els.tableCount);
  root.appendChild(h('div', {cls: 'table-wrap'}, [h('table', {cls: 'edges', id: 'edge-table'}, [els.thead, els.tbody])]));
  document.body.appendChild(els.tip);
  document.addEventListener('keydown', function (ev) { if (ev.key === 'Escape') unpin(); });
  drawTokens();
  refresh();
  if (restored.pin) {  // the pinned node or edge of a link, when the view still shows it
    var target = restored.pin.type === 'node' ? view.byId[restored.pin.id] :
      view.edges.filter(function (e) { return e.id === restored.pin.id; })[0];
    if (target) pin({type: restored.pin.type, item: target}, null);
  }
  document.body.setAttribute('data-ready', '1');
}

init();

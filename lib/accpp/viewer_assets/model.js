/* ACC++ circuit viewer, part 2 of 5: the display graph (layer filter, weight filter, the reader's
 * groups, collapsed leaves) and search. */

// -- groups: nodes the reader merged into one named node (closed) or marked (open) -----------------
function addGroup(name, members, open) {
  var ids = {};
  members.forEach(function (id) { ids[id] = true; });
  state.groups.forEach(function (g) { g.members = g.members.filter(function (id) { return !ids[id]; }); });
  state.groups = state.groups.filter(function (g) { return g.members.length; });
  var taken = {};
  state.groups.forEach(function (g) { taken[g.name] = true; });
  name = (name || '').trim() || 'group ' + (state.groups.length + 1);
  var base = name, k = 2;
  while (taken[name]) name = base + ' (' + (k++) + ')';
  state.groups.push({name: name, members: Object.keys(ids), open: !!open});
}
function groupIndexOf() {  // node id -> index of its group, for every group (open or closed)
  var out = {};
  state.groups.forEach(function (g, gi) { g.members.forEach(function (id) { out[id] = gi; }); });
  return out;
}

// -- display graph -----------------------------------------------------------------------------------
function buildView() {
  var dnodes = [], dmap = {}, byId = {};
  var inGroup = groupIndexOf();
  nodes.forEach(function (n) {
    var l = n.view.layer;
    if (l < state.lo || l > state.hi) return;
    var gi = inGroup[n.id];
    if (gi !== undefined && !state.groups[gi].open) {
      var gkey = 'grp:' + gi;
      if (!byId[gkey]) {
        byId[gkey] = {id: gkey, group: true, gi: gi, agg: false, kind: 'group', members: [],
                      view: {name: state.groups[gi].name, pos: '', comp: state.groups[gi].name, col: -1, layer: -1, sub: 9}};
        dnodes.push(byId[gkey]);
      }
      byId[gkey].members.push(n);
      dmap[n.id] = gkey;
    } else if (state.collapse && (n.kind === 'mlp' || n.kind === 'emb')) {
      var key = 'agg:' + n.view.comp;
      if (!byId[key]) {
        byId[key] = {id: key, agg: true, kind: n.kind, members: [], view: {name: n.view.name, pos: '', comp: n.view.comp,
                     col: n.view.col, layer: l, sub: n.view.sub}};
        dnodes.push(byId[key]);
      }
      byId[key].members.push(n);
      byId[key].view.pos = '\u00d7' + byId[key].members.length;
      dmap[n.id] = key;
    } else {
      var d = {id: n.id, agg: false, kind: n.kind, node: n, view: n.view, inGroup: gi !== undefined ? gi : null};
      byId[n.id] = d;
      dnodes.push(d);
      dmap[n.id] = n.id;
    }
  });
  dnodes.forEach(function (d) {  // a closed group sits at its last member's layer, at their position if they share one
    if (!d.group) return;
    var dests = {};
    d.members.forEach(function (m) {
      d.view.col = Math.max(d.view.col, m.view.col);
      d.view.layer = Math.max(d.view.layer, m.view.layer);
      dests[m.dest] = true;
    });
    var keys = Object.keys(dests);
    d.dest = keys.length === 1 ? Number(keys[0]) : null;
    d.view.pos = '\u00d7' + d.members.length;
  });
  var dedges = [], emap = {}, tableEdges = [];
  edges.forEach(function (e) {
    var a = dmap[e.source], b = dmap[e.target];
    if (a === undefined || b === undefined) return;
    if (e.side !== 'seed' && absW(e) < state.minWeight) return;
    tableEdges.push(e);
    if (a === b) return;  // inside one group: drawn when the group is opened
    var key = (a !== e.source || b !== e.target) ? a + '|' + b + '|' + e.side : e.id;
    if (!emap[key]) {
      emap[key] = {id: key, source: a, target: b, side: e.side, members: [], weight: 0};
      dedges.push(emap[key]);
    }
    emap[key].members.push(e);
    emap[key].weight += (typeof e.weight === 'number' ? e.weight : 0);
  });
  return {nodes: dnodes, byId: byId, dmap: dmap, edges: dedges, tableEdges: tableEdges};
}
function displayName(id) {
  var d = view && view.byId[id];
  if (!d) return id;
  return d.agg || d.group ? d.view.name + ' ' + d.view.pos : d.id;
}
function membersOf(d) { return d.agg || d.group ? d.members : [d.node]; }

// -- search: a token's text, a layer (L5, layer 5), a head (A5.3, 5.3), a node (M12, E) or a
// description's words ------------------------------------------------------------------------------
function parseQuery(q) {
  q = (q || '').trim();
  if (!q) return null;
  var m = /^(?:l|layer\s*)(\d+)$/i.exec(q);
  if (m) return {layer: Number(m[1]), text: q.toLowerCase()};
  m = /^(?:a|head\s*)?(\d+)\.(\d+)$/i.exec(q);
  if (m) return {layer: Number(m[1]), head: Number(m[2]), text: q.toLowerCase()};
  return {text: q.toLowerCase()};
}
function tokenHas(i, text) {
  var t = tokText(i);
  return t !== null && t.toLowerCase().indexOf(text) >= 0 && t.trim() !== '';
}
function nodeMatches(n, p) {
  if (p.head !== undefined) return (n.kind === 'head' || n.kind === 'offset') && n.layer === p.layer && n.head === p.head;
  if (p.layer !== undefined) return n.kind !== 'emb' && n.kind !== 'logits' && n.layer === p.layer;
  if (n.view.name.toLowerCase() === p.text || n.id.toLowerCase() === p.text) return true;
  return tokenHas(n.dest, p.text) || (n.kind === 'head' && tokenHas(n.src, p.text));
}
function descTexts(desc) {
  if (!desc) return [];
  var out = [desc.description];
  (desc.others || []).forEach(function (o) { out.push(o.description); });
  return out;
}
function edgeMatches(e, p) {
  if (p.head !== undefined || p.layer !== undefined || p.text.length < 2) return false;
  return descTexts(e.desc).some(function (t) { return t.toLowerCase().indexOf(p.text) >= 0; });
}
function searchMatches(v) {  // {nodes: display ids, edges: display ids} of the current query
  var p = parseQuery(state.query);
  var out = {nodes: [], edges: [], active: !!p};
  if (!p) return out;
  v.nodes.forEach(function (d) {
    var hit = d.group && d.view.name.toLowerCase() === p.text;
    if (!hit) hit = membersOf(d).some(function (n) { return nodeMatches(n, p); });
    if (hit) out.nodes.push(d.id);
  });
  v.edges.forEach(function (de) {
    if (de.members.some(function (e) { return edgeMatches(e, p); })) out.edges.push(de.id);
  });
  return out;
}

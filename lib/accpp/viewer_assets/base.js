/* ACC++ circuit viewer, part 1 of 5: data, state, small helpers, colour theme, the view in the URL.
 * accpp/viewer.py concatenates the parts (base, model, layout, draw, panels) inside one function
 * scope and inlines them into the page; plain DOM + SVG, no library, no network.
 * All text coming from the data, the URL or the reader is inserted with textContent (never parsed
 * as HTML). */
var DATA = JSON.parse(document.getElementById('accpp-circuit-data').textContent);
var SVGNS = (function () {  // the SVG namespace, read from the parser rather than spelled out
  var probe = document.createElement('div');
  probe.innerHTML = '<svg>';  // the parser closes it
  return probe.firstChild.namespaceURI;
})();

var SIDE_NAME = {d: 'query (d)', s: 'key (s)', seed: 'seed'};
var KIND_NAME = {head: 'attention firing', mlp: 'MLP output', emb: 'embedding', bias: 'attention-output bias',
                 offset: 'bias offset (query/key bias folded in)', logits: 'logit difference', group: 'group'};

var nodes = DATA.nodes, edges = DATA.edges, tokens = DATA.tokens, meta = DATA.meta || {};
var nodeById = {}, edgeById = {};
nodes.forEach(function (n) { nodeById[n.id] = n; });
edges.forEach(function (e) { edgeById[e.id] = e; });
var inEdges = {}, outEdges = {};
edges.forEach(function (e) {
  (inEdges[e.target] = inEdges[e.target] || []).push(e);
  (outEdges[e.source] = outEdges[e.source] || []).push(e);
});
var LMAX = DATA.n_layers;

// The view. Everything but the selection and the table's sort order is kept in the URL (#...).
var DEFAULTS = {lo: -1, hi: LMAX, collapse: false, minWeight: 0, zoom: 1, layout: 'auto', query: ''};
var state = {lo: -1, hi: LMAX, collapse: false, minWeight: 0, zoom: 1, layout: 'auto', query: '',
             groups: [],        // [{name, members: [node ids], open: bool}]
             selected: {},      // node id -> true
             sortKey: 'weight', sortDir: -1, pinned: null};
var view = null;  // the current display graph (after filter, groups and collapse) and its layout
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
function tokShort(i, most) {  // visible whitespace, clipped
  var t = tokText(i);
  most = most || 14;
  if (t === null) return '';
  t = t.replace(/\n/g, '\u21b5').replace(/\t/g, '\u21e5').replace(/ /g, '\u00b7');
  return t.length > most ? t.slice(0, most - 1) + '\u2026' : t;
}
function layerName(l) { return l < 0 ? 'E' : (l >= LMAX ? 'logits' : String(l)); }
function absW(e) { return Math.abs(typeof e.weight === 'number' ? e.weight : 0); }
function cssEscape(x) { return (window.CSS && CSS.escape) ? CSS.escape(x) : x.replace(/["\\]/g, '\\$&'); }

// -- colour theme: the book's (the parent page's data-theme), else the reader's system setting -------
var themeSource = 'system';
function applyTheme(t) {
  document.documentElement.setAttribute('data-theme', t === 'dark' ? 'dark' : 'light');
}
function initTheme() {
  var mq = window.matchMedia ? window.matchMedia('(prefers-color-scheme: dark)') : null;
  var parentTheme = null;
  if (window.parent !== window) {
    try {  // readable only when the page is not sandboxed away from its parent
      var root = window.parent.document.documentElement;
      parentTheme = root.getAttribute('data-theme');
      if (window.MutationObserver) {
        new MutationObserver(function () {
          var t = root.getAttribute('data-theme');
          if (t === 'dark' || t === 'light') { themeSource = 'parent'; applyTheme(t); }
        }).observe(root, {attributes: true, attributeFilter: ['data-theme']});
      }
    } catch (err) { parentTheme = null; }
  }
  if (parentTheme === 'dark' || parentTheme === 'light') { themeSource = 'parent'; applyTheme(parentTheme); }
  else applyTheme(mq && mq.matches ? 'dark' : 'light');
  if (mq) {
    var follow = function (ev) { if (themeSource === 'system') applyTheme(ev.matches ? 'dark' : 'light'); };
    if (mq.addEventListener) mq.addEventListener('change', follow); else if (mq.addListener) mq.addListener(follow);
  }
  // a sandboxed frame cannot read its parent: the book's page tells it (docs/book/_static/compendium.js)
  window.addEventListener('message', function (ev) {
    if (ev.source !== window.parent || !ev.data || typeof ev.data !== 'object') return;
    var t = ev.data.accppTheme;
    if (t === 'dark' || t === 'light') { themeSource = 'parent'; applyTheme(t); }
  });
  if (window.parent !== window) {
    try { window.parent.postMessage({accppViewer: 'theme?'}, '*'); } catch (err) { /* no parent to ask */ }
  }
}

// -- the view in the URL: #lo=3&hi=12&leaves=1&w=0.05&zoom=80&layout=tokens&q=Mary&pin=n:ID&groups=[...] --
function encodeState() {
  var p = new URLSearchParams();
  if (state.lo !== DEFAULTS.lo) p.set('lo', String(state.lo));
  if (state.hi !== DEFAULTS.hi) p.set('hi', String(state.hi));
  if (state.collapse) p.set('leaves', '1');
  if (state.minWeight > 0) p.set('w', String(state.minWeight));
  if (state.zoom !== 1) p.set('zoom', String(Math.round(state.zoom * 100)));
  if (state.layout !== 'auto') p.set('layout', state.layout);
  if (state.query) p.set('q', state.query);
  if (state.pinned) p.set('pin', (state.pinned.type === 'node' ? 'n:' : 'e:') + state.pinned.item.id);
  if (state.groups.length) {
    p.set('groups', JSON.stringify(state.groups.map(function (g) { return [g.name, g.members, g.open ? 1 : 0]; })));
  }
  return p.toString();
}
function writeHash() {
  var text = encodeState();
  var url = location.href.split('#')[0] + (text ? '#' + text : '');
  try { history.replaceState(null, '', url); }
  catch (err) { try { location.hash = text; } catch (err2) { /* a page that cannot keep a fragment */ } }
  if (els.link && els.link.style.display !== 'none') els.link.value = linkText();
}
function linkText() {
  var text = encodeState();
  // a page shown inside another (srcdoc) has no address of its own: give the fragment to add to the page's
  return location.protocol === 'about:' ? '#' + text : location.href.split('#')[0] + (text ? '#' + text : '');
}
function intIn(x, lo, hi) {
  var v = Number(x);
  return x !== null && x !== '' && isFinite(v) && Math.floor(v) === v && v >= lo && v <= hi ? v : null;
}
function readHash() {  // the state a link gives; anything malformed or unknown is ignored
  var out = {pin: null};
  var raw = (location.hash || '').replace(/^#/, '');
  if (!raw) return out;
  var p;
  try { p = new URLSearchParams(raw); } catch (err) { return out; }
  var lo = intIn(p.get('lo'), -1, LMAX), hi = intIn(p.get('hi'), -1, LMAX);
  if (lo !== null) state.lo = lo;
  if (hi !== null) state.hi = hi;
  if (state.lo > state.hi) { state.lo = DEFAULTS.lo; state.hi = DEFAULTS.hi; }
  state.collapse = p.get('leaves') === '1';
  var w = Number(p.get('w'));
  if (p.get('w') !== null && isFinite(w) && w > 0) state.minWeight = w;
  var z = intIn(p.get('zoom'), 40, 150);
  if (z !== null) state.zoom = z / 100;
  if (['auto', 'layers', 'tokens'].indexOf(p.get('layout')) >= 0) state.layout = p.get('layout');
  if (p.get('q')) state.query = String(p.get('q')).slice(0, 200);
  if (p.get('groups')) {
    try {
      var gs = JSON.parse(p.get('groups'));
      if (Array.isArray(gs)) {
        gs.forEach(function (g) {
          if (!Array.isArray(g) || typeof g[0] !== 'string' || !Array.isArray(g[1])) return;
          var members = g[1].filter(function (id) { return typeof id === 'string' && nodeById[id]; });
          if (members.length) addGroup(g[0].slice(0, 80), members, g[2] === 1);
        });
      }
    } catch (err) { /* a malformed list of groups is ignored */ }
  }
  var pin = p.get('pin');
  if (pin && /^[ne]:/.test(pin)) out.pin = {type: pin[0] === 'n' ? 'node' : 'edge', id: pin.slice(2)};
  return out;
}

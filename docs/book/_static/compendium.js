/* The compendium's book: tell the circuit viewers framed in a page the page's colour theme.
 * The viewers are sandboxed pages (they cannot read this page), so the page posts its theme
 * ("light" or "dark", the theme's data-theme on <html>) to every frame: when a frame asks, when the
 * page has loaded, and whenever the reader switches the theme. */
(function () {
  'use strict';
  function theme() { return document.documentElement.getAttribute('data-theme') === 'dark' ? 'dark' : 'light'; }
  function tell(win) {
    try { win.postMessage({accppTheme: theme()}, '*'); } catch (err) { /* a frame that is gone */ }
  }
  function tellAll() {
    Array.prototype.forEach.call(document.querySelectorAll('iframe'), function (f) {
      if (f.contentWindow) tell(f.contentWindow);
    });
  }
  window.addEventListener('message', function (ev) {
    if (ev.source && ev.data && typeof ev.data === 'object' && ev.data.accppViewer === 'theme?') tell(ev.source);
  });
  new MutationObserver(tellAll).observe(document.documentElement, {attributes: true, attributeFilter: ['data-theme']});
  window.addEventListener('load', tellAll);
})();

"""What the browser tests measure in a page (each text's contrast against what is painted
under it, figures cut by their box, overflow) and how they switch the front end's theme."""

from __future__ import annotations

from tests.browser.notebook_page import TIMEOUT_MS

# Contrast against what is painted under each text: the stack of elements at the middle of
# its first line box (document.elementsFromPoint), from the text's own element down to the
# first opaque background, each layer blended over the one below it; not only the text's
# ancestors (a marker drawn over a bar is not inside the bar). Muted text's opacity is
# blended into its colour.
CONTRAST_JS = """panel => {
  const parse = c => { const m = c.match(/rgba?\\(([^)]+)\\)/); if (!m) return null;
    const p = m[1].split(/[ ,\\/]+/).filter(Boolean).map(Number);
    return [p[0], p[1], p[2], p.length > 3 ? p[3] : 1]; };
  const lum = rgb => { const f = v => { v /= 255;
    return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); };
    return 0.2126 * f(rgb[0]) + 0.7152 * f(rgb[1]) + 0.0722 * f(rgb[2]); };
  const opacity = el => { let o = 1;
    for (let e = el; e; e = e.parentElement) o *= Number(getComputedStyle(e).opacity);
    return o; };
  let over = '';  // what covers the text, when something does
  const painted = (el, x, y) => {
    const stack = document.elementsFromPoint(x, y);
    let start = -1;
    for (let e = el; e && start < 0; e = e.parentElement) start = stack.indexOf(e);
    over = start > 0 ? ' under ' + stack.slice(0, start).map(e => e.tagName + '.'
      + String(e.className).split(' ').slice(-2).join('.')).join(' < ') : '';
    const layers = [];
    for (let i = Math.max(start, 0); i < stack.length; i++) {
      const c = parse(getComputedStyle(stack[i]).backgroundColor);
      if (!c || c[3] <= 0) continue;
      const a = c[3] * opacity(stack[i]);
      layers.push([c[0], c[1], c[2], a]);
      if (a >= 1) break; }
    let base = [255, 255, 255];
    for (let i = layers.length - 1; i >= 0; i--) { const c = layers[i];
      base = base.map((v, k) => c[k] * c[3] + v * (1 - c[3])); }
    return base; };
  const bad = [], seen = new Set();
  const walker = document.createTreeWalker(panel, NodeFilter.SHOW_TEXT);
  while (walker.nextNode()) {
    const node = walker.currentNode, el = node.parentElement;
    if (!node.textContent.trim() || seen.has(el) || !el.getClientRects().length) continue;
    seen.add(el);
    const range = document.createRange(); range.selectNodeContents(node);
    let box = [...range.getClientRects()].find(r => r.width > 0 && r.height > 0);
    if (!box) continue;
    if (box.top < 0 || box.bottom > innerHeight) { el.scrollIntoView({block: 'center'});
      box = [...range.getClientRects()].find(r => r.width > 0 && r.height > 0); }
    const bg = painted(el, box.left + box.width / 2, box.top + box.height / 2);
    const style = getComputedStyle(el), fg = parse(style.color);
    const a = fg[3] * opacity(el);
    const seen_fg = fg.slice(0, 3).map((v, k) => v * a + bg[k] * (1 - a));
    const l1 = lum(seen_fg), l2 = lum(bg);
    const ratio = (Math.max(l1, l2) + 0.05) / (Math.min(l1, l2) + 0.05);
    if (ratio < 4.5) bad.push(ratio.toFixed(2) + ' "' + node.textContent.trim().slice(0, 40)
      + '" ' + style.color + ' on rgb(' + bg.map(Math.round) + ')' + over
      + ' at ' + Math.round(box.left) + ',' + Math.round(box.top));
  }
  return bad; }"""

# Every figure and model name whole: not wider than its own box (an ellipsis or a clip
# would hide the rest) and inside every box around it that clips, up to the panel.
FIGURES_JS = """panel => {
  const out = [], edge = panel.getBoundingClientRect();
  const picked = '.cgg-figure, .cgg-gpu-name, .cgg-versions, .cgg-holder, .cgg-fresh, '
    + '.cgg-no-gpu b, .cgg-entry-size, .cgg-group-size, .cgg-now-leak, .cgg-held-head, '
    + '.cgg-chart-cell';
  for (const el of panel.querySelectorAll(picked)) {
    if (!el.getClientRects().length) continue;
    const text = (el.textContent || '').trim().slice(0, 50);
    // where its glyphs are: the text's own boxes (a label's padding may overhang)
    const range = document.createRange(); range.selectNodeContents(el);
    const boxes = [...range.getClientRects()].filter(b => b.width > 0);
    const r = boxes.length ? {left: Math.min(...boxes.map(b => b.left)),
      right: Math.max(...boxes.map(b => b.right))} : el.getBoundingClientRect();
    if (el.clientWidth && el.scrollWidth > el.clientWidth + 1)
      out.push('cut inside its box (' + el.scrollWidth + ' > ' + el.clientWidth + '): ' + text);
    if (r.right > edge.right + 1 || r.left < edge.left - 1)
      out.push('past the panel: ' + text);
    for (let e = el.parentElement; e && e !== panel.parentElement; e = e.parentElement) {
      const s = getComputedStyle(e);
      if (s.overflowX === 'visible') continue;
      const c = e.getBoundingClientRect();
      if (r.right > c.right + 1 || r.left < c.left - 1) {
        out.push('clipped by ' + e.className + ': ' + text); break; } }
  }
  return out; }"""

OVERFLOW_JS = """panel => {
  const right = panel.getBoundingClientRect().right + 1, out = [];
  for (const el of panel.querySelectorAll('*')) {
    const r = el.getBoundingClientRect();
    let clipped = false;  // cut by an ellipsis box that itself ends inside the panel
    for (let e = el.parentElement; e && e !== panel; e = e.parentElement) {
      const s = getComputedStyle(e);
      if (s.overflowX !== 'visible' && e.getBoundingClientRect().right <= right) {
        clipped = true; break; } }
    if (r.width && r.right > right && !clipped) out.push(el.tagName + '.' + el.className + ' ' +
      Math.round(r.right - right) + ' px: ' + (el.textContent || '').trim().slice(0, 40));
  }
  if (panel.scrollWidth > panel.clientWidth + 1) out.push('panel scrolls sideways');
  return out.slice(0, 10); }"""


# a dark user style sheet for Notebook 6 (it has no dark theme of its own: users add one,
# which sets the page's colours and the theme variables its widgets read)
NB6_DARK = (
    "html:root{--jp-content-font-color0:#d4d4d4;--jp-content-font-color1:#d4d4d4;"
    "--jp-ui-font-color0:#e0e0e0;--jp-ui-font-color1:#d4d4d4;--jp-ui-font-color2:#b0b0b0;"
    "--jp-layout-color0:#1e1e1e;--jp-layout-color1:#1e1e1e;--jp-layout-color2:#3a3a3a;"
    "--jp-layout-color3:#555;--jp-border-color1:#777;--jp-border-color2:#555;"
    "--jp-widgets-color:#d4d4d4;--jp-widgets-label-color:#d4d4d4;"
    "--jp-widgets-input-color:#d4d4d4;--jp-widgets-input-background-color:#2a2a2a;"
    "--jp-widgets-input-border-color:#777}"
    "body, #notebook, #notebook-container, .cell, div.output_area, .output_subarea, "
    "div.output_wrapper {background:#1e1e1e !important; color:#d4d4d4 !important}"
)


def set_theme(page, frontend: str, dark: bool) -> None:
    """JupyterLab's own dark or light theme; in Notebook 6, the dark user style sheet
    added or removed."""
    if frontend == "lab":
        theme = "JupyterLab Dark" if dark else "JupyterLab Light"
        page.evaluate(
            f"() => window.jupyterapp.commands.execute('apputils:change-theme', "
            f"{{theme: '{theme}'}})"
        )
        light = "false" if dark else "true"
        page.wait_for_function(
            f"() => document.body.dataset.jpThemeLight === '{light}'", timeout=TIMEOUT_MS
        )
    elif dark:
        page.evaluate(
            "css => { const s = document.createElement('style'); s.id = 'cgg-test-dark';"
            " s.textContent = css; document.head.appendChild(s); }",
            NB6_DARK,
        )
    else:
        page.evaluate("() => document.getElementById('cgg-test-dark').remove()")

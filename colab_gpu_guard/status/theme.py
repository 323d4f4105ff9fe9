"""The panel's colours and type, from the front end's theme."""

from __future__ import annotations

# Text takes the theme's own colour (``inherit``) and muted text lowers its opacity, so it
# reads in light and dark themes of JupyterLab, Notebook 6, VS Code and Colab alike.
FONT = (
    "font-family:var(--jp-ui-font-family,var(--vscode-font-family,system-ui,sans-serif));"
    "font-size:13px;line-height:18px;color:inherit"
)
MUTED = "opacity:.8"
NOWRAP = "white-space:nowrap"
CODE = "font-family:var(--jp-code-font-family,var(--vscode-editor-font-family,monospace))"
BORDER = "var(--jp-border-color1,var(--vscode-panel-border,rgba(128,128,128,.55)))"

# meaning -> (background, text): each pair >= 4.5:1 on its own. Where a colour carries
# meaning (an error, a warning, a badge) it comes as a pair we choose - background and text
# together - so it never depends on the page behind it.
PAIRS = {
    "error": ("#b71c1c", "#ffffff"),  # 6.6:1
    "warn": ("#ffd54f", "#000000"),  # 14:1
    "ok": ("#1b5e20", "#ffffff"),  # 8.8:1
    "info": ("transparent", "inherit"),
}

# bar segments (not text): JupyterLab's variables where they exist, VS Code's next, then a
# fixed colour that reads on white and on black
SEGMENT_COLOURS = {
    "tensors": "var(--jp-brand-color1,var(--vscode-charts-blue,#1976d2))",
    "cache": "var(--jp-brand-color3,var(--vscode-charts-blue,#90caf9))",
    "context": "var(--jp-accent-color1,var(--vscode-charts-purple,#7b1fa2))",
    "kernel": "var(--jp-brand-color1,var(--vscode-charts-blue,#1976d2))",
    "others": "var(--jp-warn-color1,var(--vscode-charts-orange,#f57c00))",
    "used": "var(--jp-brand-color1,var(--vscode-charts-blue,#1976d2))",
    "driver": "rgba(128,128,128,.6)",
    "free": "rgba(128,128,128,.16)",
}


def segment_colour(key: str) -> str:
    return SEGMENT_COLOURS.get(key.split("+", 1)[0], SEGMENT_COLOURS["driver"])


def label(kind: str, text_html: str, css_class: str = "", wrap: bool = False) -> str:
    """A short coloured label (`text_html` already escaped); `wrap`: a sentence that may
    wrap over lines (its background follows each line)."""
    background, colour = PAIRS.get(kind, PAIRS["info"])
    cls = f' class="{css_class}"' if css_class else ""
    flow = "box-decoration-break:clone;-webkit-box-decoration-break:clone" if wrap else NOWRAP
    return (
        f'<span{cls} style="background:{background};color:{colour};border-radius:3px;'
        f'padding:0 5px;{flow}">{text_html}</span>'
    )

#!/usr/bin/env python3
"""Draws the layout of docker/grafana/outbox-dashboard.json as an SVG for the manual: each panel
at its place on Grafana's 24-column grid, with its title and the series its queries draw (their
metrics and legends). No Grafana runs here, so it shows no data: it is a picture of what the
dashboard holds, not a screenshot.

    docker/grafana/render_layout.py            write docs/images/dashboard.svg
    docker/grafana/render_layout.py --check    exit 1 if that file is not what the JSON gives
"""

import html
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
DASHBOARD = os.path.join(HERE, "outbox-dashboard.json")
OUT = os.path.join(ROOT, "docs", "images", "dashboard.svg")
COL, ROW, PAD = 40, 28, 6  # pixels per grid column and row, gap between panels
COLORS = ["#7eb26d", "#eab839", "#6ed0e0", "#ef843c", "#e24d42", "#1f78c1", "#ba43a9"]


def series(target):
    """'<legend> — <metric>' for one query of a panel."""
    legend = re.sub(r"\{\{(\w+)\}\}", r"<\1>", target.get("legendFormat") or "")
    metrics = sorted(set(re.findall(r"\boutbox_\w+", target.get("expr", ""))))
    return f"{legend or 'series'}: {', '.join(metrics)}"


def render(dashboard):
    panels = dashboard["panels"]
    width = 24 * COL
    height = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in panels) * ROW + 40
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" font-family="Helvetica, Arial, sans-serif">',
           f'<rect width="{width}" height="{height}" fill="#111217"/>',
           f'<text x="{PAD + 4}" y="24" fill="#d8d9da" font-size="16">{html.escape(dashboard["title"])} '
           f'(layout of docker/grafana/outbox-dashboard.json; no data)</text>']
    for p in panels:
        g = p["gridPos"]
        x, y = g["x"] * COL + PAD, g["y"] * ROW + 40
        w, h = g["w"] * COL - 2 * PAD, g["h"] * ROW - 2 * PAD
        out.append(f'<rect x="{x}" y="{y}" width="{w}" height="{h}" rx="3" fill="#181b1f" stroke="#2c3235"/>')
        out.append(f'<text x="{x + 10}" y="{y + 22}" fill="#d8d9da" font-size="14" font-weight="bold">'
                   f'{html.escape(p["title"])}</text>')
        # a flat baseline for each series, in the panel's plot area, and its legend below
        lines = [series(t) for t in p.get("targets", [])]
        plot_bottom = y + h - 18 * len(lines) - 12
        out.append(f'<line x1="{x + 10}" y1="{plot_bottom}" x2="{x + w - 10}" y2="{plot_bottom}" stroke="#2c3235"/>')
        for i, text in enumerate(lines):
            color = COLORS[i % len(COLORS)]
            ly = plot_bottom + 18 * (i + 1)
            out.append(f'<rect x="{x + 10}" y="{ly - 9}" width="14" height="4" fill="{color}"/>')
            out.append(f'<text x="{x + 30}" y="{ly - 3}" fill="#9fa7b3" font-size="11">{html.escape(text)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main():
    with open(DASHBOARD, encoding="utf-8") as f:
        svg = render(json.load(f))
    if "--check" in sys.argv[1:]:
        current = open(OUT, encoding="utf-8").read() if os.path.exists(OUT) else ""
        if current != svg:
            sys.exit("render_layout: docs/images/dashboard.svg is not the dashboard's layout; "
                     "run docker/grafana/render_layout.py")
        return
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w", encoding="utf-8") as f:
        f.write(svg)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""The shipped dashboard's panels as one picture, drawn from a real Prometheus (issue 32,
item 5): no Grafana runs here, so each panel's queries are run over a time range with Prometheus'
HTTP API (query_range, Grafana's variables filled in as Grafana would) and drawn with matplotlib,
one small plot per panel, one line per series.

  render_panels.py PROMETHEUS_URL DASHBOARD.json OUT.png [--minutes N]

node_install draws it from its live Prometheus when PHALANX_DASHBOARD_PNG names a file (the
picture in docs/operations.md came from that run). Needs matplotlib (Debian's
python3-matplotlib); exits 77 without it.
"""
import argparse
import json
import math
import os
import sys
import time
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dashboard_check import substitute  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
import debian_python  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "deploy"))
from deploy_test import all_panels  # noqa: E402

SKIP = 77


def query_range(url, expr, start, end, step):
    params = urllib.parse.urlencode({"query": expr, "start": start, "end": end, "step": step})
    with urllib.request.urlopen(f"{url}/api/v1/query_range?{params}", timeout=30) as r:
        body = json.loads(r.read().decode())
    if body.get("status") != "success":
        raise RuntimeError(f"{expr}: {body}")
    return body["data"]["result"]


def panels_with_series(url, dashboard, minutes):
    """[(title, [(legend, [t], [value])])] for every panel with queries."""
    end = time.time()
    start = end - 60 * minutes
    step = max(1, int(60 * minutes / 200))
    out = []
    for panel in all_panels(dashboard):
        lines = []
        for target in panel.get("targets", []):
            if not target.get("expr"):
                continue
            for series in query_range(url, substitute(target["expr"]), start, end, step):
                metric = series.get("metric", {})
                legend = ",".join(f"{k}={v}" for k, v in sorted(metric.items())) or \
                    target.get("legendFormat") or target.get("refId", "")
                points = [(float(t) - end, float(v)) for t, v in series["values"]
                          if not math.isnan(float(v))]
                lines.append((legend, [p[0] for p in points], [p[1] for p in points]))
        if panel.get("targets"):
            out.append((panel.get("title", ""), lines))
    return out


def draw(panels, out, minutes):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    columns = 4
    rows = math.ceil(len(panels) / columns)
    fig, axes = plt.subplots(rows, columns, figsize=(16, 2.6 * rows), squeeze=False)
    for ax, (title, lines) in zip(axes.flat, panels):
        ax.set_title(title, fontsize=8)
        ax.tick_params(labelsize=6)
        ax.set_xlim(-60 * minutes, 0)
        if not any(xs for _, xs, _ in lines):
            ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes,
                    fontsize=8, color="gray")
        for legend, xs, ys in lines[:8]:
            ax.plot(xs, ys, lw=1, label=legend[:40])
        if 0 < len(lines) <= 4:
            ax.legend(fontsize=5, loc="upper left")
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    fig.suptitle("Phalanx dashboard (deploy/dashboards/phalanx.json) from a live Prometheus; "
                 "x: seconds before now", fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 0.98))
    fig.savefig(out, dpi=90)
    plt.close(fig)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("url")
    p.add_argument("dashboard")
    p.add_argument("out")
    p.add_argument("--minutes", type=float, default=3)
    args = p.parse_args(argv)
    if not debian_python.reexec_for("matplotlib"):
        print("render_panels: matplotlib is not installed (apt-get install python3-matplotlib)",
              file=sys.stderr)
        return SKIP
    with open(args.dashboard) as f:
        dashboard = json.load(f)
    panels = panels_with_series(args.url.rstrip("/"), dashboard, args.minutes)
    draw(panels, args.out, args.minutes)
    print(f"render_panels: {len(panels)} panels, "
          f"{sum(len(lines) for _, lines in panels)} series -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

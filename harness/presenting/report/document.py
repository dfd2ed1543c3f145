"""The report as a list of blocks (headings, paragraphs, tables, figures,
code), rendered to Markdown and to one HTML page. Every text is escaped."""

from __future__ import annotations

import base64
import html
from dataclasses import dataclass, field
from pathlib import Path

from harness.base.format import md_escape, slug


@dataclass
class Doc:
    blocks: list = field(default_factory=list)

    def heading(self, level: int, text: str):
        self.blocks.append(("h", level, text))

    def para(self, text: str):
        self.blocks.append(("p", text))

    def bullets(self, items: list[str]):
        """A list, an item a line: one line of Markdown each, where paragraphs take two."""
        self.blocks.append(("list", list(items)))

    def table(self, header: list[str], rows: list[list[str]], bold_row: int | None = None):
        self.blocks.append(("table", header, rows, bold_row))

    def figure(self, stem: str, caption: str):
        self.blocks.append(("fig", stem, caption))

    def code(self, text: str):
        self.blocks.append(("code", text))

    def links(self, items: list[tuple[str, str]], lead: str = ""):
        """A line of links, ``items`` (text, target .md path relative to the
        page); the HTML rendering points at the .html beside each."""
        self.blocks.append(("links", lead, items))


def render_markdown(doc: Doc, figure_dir: str) -> str:
    lines: list[str] = []
    for block in doc.blocks:
        kind = block[0]
        if kind == "h":
            lines += ["#" * block[1] + " " + md_escape(block[2]), ""]
        elif kind == "p":
            lines += [md_escape(block[1]), ""]
        elif kind == "list":
            lines += [f"- {md_escape(item)}" for item in block[1]] + [""]
        elif kind == "code":
            lines += ["```", block[1].replace("```", "'''"), "```", ""]
        elif kind == "table":
            _, header, rows, bold = block
            lines.append("| " + " | ".join(md_escape(h) for h in header) + " |")
            lines.append("|" + "---|" * len(header))
            for index, row in enumerate(rows):
                cells = [md_escape(c) for c in row]
                if index == bold:
                    cells = [f"**{c}**" if c else c for c in cells]
                lines.append("| " + " | ".join(cells) + " |")
            lines.append("")
        elif kind == "fig":
            _, stem, caption = block
            lines += [f"![{md_escape(caption)}]({figure_dir}/{stem}.png)", ""]
        elif kind == "links":
            _, lead, items = block
            lines += [(md_escape(lead) + " " if lead else "")
                      + " · ".join(f"[{md_escape(text)}]({target})" for text, target in items), ""]
    return "\n".join(lines)


# The headings the HTML's table of contents lists: sections and their parts,
# not every case (hundreds of them: the tables of a part are a scroll away).
TOC_LEVELS = (2, 3)


def heading_anchors(doc: Doc) -> dict[int, str]:
    """Each heading's block index -> a unique id (a repeated title gets -2, -3, ...)."""
    anchors, used = {}, {}
    for index, block in enumerate(doc.blocks):
        if block[0] == "h":
            base = slug(block[2]) or "section"
            used[base] = used.get(base, 0) + 1
            anchors[index] = base if used[base] == 1 else f"{base}-{used[base]}"
    return anchors


def table_of_contents(doc: Doc, anchors: dict[int, str]) -> str:
    """A nested list of links to the TOC_LEVELS headings, in order."""
    esc = html.escape
    items, depth = ["<nav class='toc'><strong>Contents</strong>"], 0
    for index, block in enumerate(doc.blocks):
        if block[0] != "h" or block[1] not in TOC_LEVELS:
            continue
        level = TOC_LEVELS.index(block[1]) + 1
        while depth < level:
            items.append("<ul>")
            depth += 1
        while depth > level:
            items.append("</ul>")
            depth -= 1
        items.append(f"<li><a href='#{anchors[index]}'>{esc(block[2])}</a></li>")
    items += ["</ul>"] * depth + ["</nav>"]
    return "".join(items)


def html_target(target: str) -> str:
    """A link's Markdown target as the HTML page beside it (an anchor kept)."""
    path, hash_, anchor = target.partition("#")
    return (path[:-3] + ".html" if path.endswith(".md") else path) + hash_ + anchor


def render_html(doc: Doc, figures: Path, title: str, embed: bool = True, figure_prefix: str | None = None) -> str:
    """One HTML page; figures embedded as data: URIs (a self-contained file),
    or linked relatively (``embed=False``: smaller, beside its figures)."""
    esc = html.escape
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{esc(title)}</title>",
             "<style>body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;"
             "color:#222}table{border-collapse:collapse;margin:1em 0;font-size:13px}"
             "td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}td:first-child,th:first-child"
             "{text-align:left}tr.best td{font-weight:bold;background:#eef7ee}img{max-width:100%}"
             "pre{background:#f4f4f4;padding:8px;overflow-x:auto}div.wide{overflow-x:auto;max-width:100%}"
             "nav.toc{background:#f8f8f8;border:1px solid #ddd;padding:.5em 1em;font-size:14px}"
             "nav.toc ul{margin:.2em 0;padding-left:1.4em}</style></head><body>"]
    anchors = heading_anchors(doc)
    for index, block in enumerate(doc.blocks):
        kind = block[0]
        if kind == "h":
            parts.append(f"<h{block[1]} id='{anchors[index]}'>{esc(block[2])}</h{block[1]}>")
            if block[1] == 1:
                parts.append(table_of_contents(doc, anchors))
        elif kind == "p":
            parts.append(f"<p>{esc(block[1])}</p>")
        elif kind == "list":
            parts.append("<ul>" + "".join(f"<li>{esc(item)}</li>" for item in block[1]) + "</ul>")
        elif kind == "code":
            parts.append(f"<pre>{esc(block[1])}</pre>")
        elif kind == "links":
            _, lead, items = block
            parts.append("<p>" + (esc(lead) + " " if lead else "") + " · ".join(
                f"<a href='{esc(html_target(target))}'>{esc(text)}</a>" for text, target in items) + "</p>")
        elif kind == "table":
            _, header, rows, bold = block
            # A wide table scrolls in its own box instead of pushing the page sideways.
            parts.append("<div class='wide'><table><tr>" + "".join(f"<th>{esc(h)}</th>" for h in header) + "</tr>")
            for index, row in enumerate(rows):
                css = " class='best'" if index == bold else ""
                parts.append(f"<tr{css}>" + "".join(f"<td>{esc(str(c))}</td>" for c in row) + "</tr>")
            parts.append("</table></div>")
        elif kind == "fig":
            _, stem, caption = block
            if embed:
                source = "data:image/png;base64," + base64.b64encode((figures / f"{stem}.png").read_bytes()).decode()
            else:
                source = f"{figure_prefix if figure_prefix is not None else figures.name}/{stem}.png"
            parts.append(f"<figure><img alt='{esc(caption)}' src='{esc(source)}'>"
                         f"<figcaption>{esc(caption)}</figcaption></figure>")
    parts.append("</body></html>")
    return "\n".join(parts)


"""Reading a written site's pages back, for the dashboard tests."""

import json
import re


def page_figures(text: str) -> list[dict]:
    """The data and layout of every Plotly figure on a page."""
    decoder, found = json.JSONDecoder(), []
    for match in re.finditer(r'Plotly\.newPlot\(\s*"[^"]+",\s*', text):
        data, end = decoder.raw_decode(text, match.end())
        layout, _ = decoder.raw_decode(text, text.index("{", end))
        found.append({"data": data, "layout": layout})
    return found

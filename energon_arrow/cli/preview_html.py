"""The self-contained HTML page of `energon-arrow preview --html`: per split, a card per sample with thumbnails of
its image parts (base64 data URIs made with Pillow), its captions and its fields. No scripts, no external files."""

from __future__ import annotations

import base64
import html
import io

from energon_arrow.cli.preview_text import describe, sample_fields
from energon_arrow.images.decode import IMAGE_EXTENSIONS

FIELD_CHARS = 400  # a field's text is cut after this many characters

STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5em; background: #fafafa; color: #222; }
h1 { font-size: 1.3em; } h2 { font-size: 1.1em; margin-top: 2em; }
.grid { display: grid; grid-template-columns: repeat(auto-fill, minmax(280px, 1fr)); gap: 1em; }
.card { background: #fff; border: 1px solid #ddd; border-radius: 6px; padding: .7em; overflow: hidden; }
.card.failed { border-color: #c00; }
.thumbs img { max-width: 100%; display: block; margin: 0 auto .4em; image-rendering: auto; }
.caption { font-size: 1em; margin: .3em 0 .6em; }
.error { color: #c00; font-family: monospace; white-space: pre-wrap; }
table { border-collapse: collapse; width: 100%; font-size: .8em; }
th { text-align: left; vertical-align: top; padding: .15em .4em .15em 0; white-space: nowrap; color: #555; }
td { font-family: monospace; white-space: pre-wrap; word-break: break-all; }
"""


def thumbnail(data, size: int) -> tuple[str | None, str | None]:
    """(data URI of a JPEG/PNG thumbnail at most `size` px, None) or (None, why the image did not decode)."""
    from PIL import Image

    try:
        with Image.open(io.BytesIO(bytes(data))) as img:
            img.load()
            img.thumbnail((size, size))
            alpha = img.mode in ("RGBA", "LA", "P")
            img = img.convert("RGBA" if alpha else "RGB")
            buf = io.BytesIO()
            img.save(buf, format="PNG" if alpha else "JPEG", quality=85)
    except Exception as exc:  # noqa: BLE001 - shown on the card
        return None, f"{type(exc).__name__}: {exc}"
    kind = "png" if alpha else "jpeg"
    return f"data:image/{kind};base64,{base64.b64encode(buf.getvalue()).decode('ascii')}", None


def _is_image(part: str) -> bool:
    return part.rsplit(".", 1)[-1].lower() in IMAGE_EXTENSIONS


def _cut(text: str) -> str:
    return text if len(text) <= FIELD_CHARS else text[:FIELD_CHARS] + f"... ({len(text):,} chars)"


def card(s, url_of, thumb: int) -> str:
    """One sample (a loader.lint.BuiltSample) as an HTML card."""
    e = html.escape
    out = [f'<div class="card{" failed" if s.error is not None else ""}">', '<div class="thumbs">']
    for part, data in s.parts.items():
        if _is_image(part):
            uri, err = thumbnail(data, thumb)
            if uri is not None:
                out.append(f'<img src="{uri}" alt="{e(f"{s.key}.{part}")}" title="{e(part)}">')
            else:
                out.append(f'<p class="error">{e(part)}: {e(err)}</p>')
    out.append("</div>")
    fields = sample_fields(s.sample) if s.sample is not None else []
    for name, _, value in fields:
        if isinstance(value, str):
            out.append(f'<p class="caption" title="{e(name)}">{e(_cut(value))}</p>')
    if s.error is not None:
        out.append(f'<p class="error">{e(type(s.error).__name__)}: {e(str(s.error))}</p>')
    rows = [("__key__", str(s.key)), ("shard", f"{url_of(s.shard)} [{s.sample_index}]")]
    rows += [
        (f"{name} ({typ})", describe(value, art=False)) for name, typ, value in fields if name != "__key__"
    ]
    if s.sample is None:
        rows += [(f"part {p}", describe(bytes(v))) for p, v in s.parts.items()]
    out.append("<table>")
    out += [f"<tr><th>{e(k)}</th><td>{e(_cut(v))}</td></tr>" for k, v in rows]
    out.append("</table></div>")
    return "\n".join(out)


def page(title: str, summary: str, sections: list[tuple[str, int, list]], url_of, thumb: int) -> str:
    """The whole page: `sections` is [(split, samples in the split, [BuiltSample, ...])]."""
    e = html.escape
    body = [f"<h1>{e(title)}</h1>", f"<p>{e(summary)}</p>"]
    for split, total, samples in sections:
        body.append(f"<h2>{e(split)}: first {len(samples):,} of {total:,} samples</h2>")
        body.append('<div class="grid">')
        body += [card(s, url_of, thumb) for s in samples]
        body.append("</div>")
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{e(title)}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n"
        + "\n".join(body)
        + "\n</body>\n</html>\n"
    )

"""Loads a memory page in headless Chromium and checks what a reader would see.

check_page(chromium, page) opens the page twice: once for its DOM after the scripts ran
(--dump-dom, with a pointer moved over the first chart by the page itself), once for a
screenshot. It fails when the page reports an error (the page's own
window error handler lists them in #page-errors), when Chromium logs any console message (the
page writes none), when the render-complete marker, the plot's paths or the hover readout are missing, or when the
screenshot is (nearly) all background. PNG decoding uses zlib only.
"""

import os
import re
import shutil
import struct
import subprocess
import tempfile
import zlib

# Debian's package name, then the usual others.
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_chromium():
    explicit = os.environ.get("CHROMIUM")
    if explicit:
        return explicit if shutil.which(explicit) else None
    for name in CHROMIUM_NAMES:
        path = shutil.which(name)
        if path:
            return path
    return None


class PageError(AssertionError):
    pass


def _run_chromium(chromium, args, url, profile):
    command = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
               "--disable-extensions", "--disable-background-networking",
               "--enable-logging=stderr", "--v=0", f"--user-data-dir={profile}",
               "--virtual-time-budget=5000", *args, url]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    if result.returncode != 0:
        raise PageError(f"chromium exited with {result.returncode}:\n{result.stderr[-3000:]}")
    return result


def _console_messages(log):
    # Chromium logs every console message and uncaught exception as "...:CONSOLE(:)N] "text"".
    return [line for line in log.splitlines() if re.search(r":CONSOLE[(:\]]", line)]


def decode_png(data):
    """(width, height, rows of RGB(A) bytes) of an 8-bit RGB or RGBA, non-interlaced PNG."""
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise PageError("the screenshot is not a PNG")
    pos, idat, header = 8, b"", None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    width, height, depth, color, _, _, interlace = header
    if depth != 8 or color not in (2, 6) or interlace:
        raise PageError(f"unexpected PNG format: depth {depth}, colour type {color}")
    channels = 3 if color == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * channels
    rows, previous = [], bytearray(stride)
    for y in range(height):
        kind = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            left = line[i - channels] if i >= channels else 0
            up = previous[i]
            corner = previous[i - channels] if i >= channels else 0
            if kind == 1:
                line[i] = (line[i] + left) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + up) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 0xFF
            elif kind == 4:
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                predictor = left if pa <= pb and pa <= pc else up if pb <= pc else corner
                line[i] = (line[i] + predictor) & 0xFF
        rows.append(bytes(line))
        previous = line
    return width, height, channels, rows


def coloured_fraction(png):
    """The fraction of pixels that are neither white nor grey: the plot's series and marks."""
    width, height, channels, rows = decode_png(png)
    coloured = 0
    for row in rows:
        for x in range(0, width * channels, channels):
            r, g, b = row[x], row[x + 1], row[x + 2]
            if max(r, g, b) - min(r, g, b) > 40:
                coloured += 1
    return coloured / float(width * height)


def check_page(chromium, page, min_paths=3, screenshot=None):
    """Returns (dom, coloured fraction); raises PageError naming what is wrong."""
    url = "file://" + os.path.abspath(page)
    with tempfile.TemporaryDirectory() as profile:
        # #hover-check makes the page move a pointer over its first chart (see the page).
        dom_run = _run_chromium(chromium, ["--dump-dom"], url + "#hover-check", profile)
        dom = dom_run.stdout
        problems = []
        console = _console_messages(dom_run.stderr)
        if console:
            problems.append("console messages:\n  " + "\n  ".join(console))
        errors = re.search(r'<ul id="page-errors"[^>]*>(.*?)</ul>', dom, re.S)
        if errors is None:
            problems.append("no #page-errors list in the DOM (the page did not load)")
        elif errors.group(1).strip():
            problems.append("page errors: " + re.sub(r"<[^>]+>", " ", errors.group(1)))
        if 'data-render="complete"' not in dom:
            problems.append('no render-complete marker (body data-render="complete")')
        paths = len(re.findall(r"<path ", dom))
        if paths < min_paths:
            problems.append(f"{paths} SVG paths in the DOM, expected at least {min_paths}")
        if "<svg" in dom and not re.search(r'class="readout">events \d', dom):
            problems.append("the hover readout of the first chart stayed empty")
        if problems:
            raise PageError(f"{page}:\n" + "\n".join(problems))

        shot = screenshot or os.path.join(profile, "screenshot.png")
        _run_chromium(chromium, [f"--screenshot={shot}", "--window-size=1280,900",
                                 "--hide-scrollbars"], url, profile)
        with open(shot, "rb") as file:
            fraction = coloured_fraction(file.read())
    if fraction < 0.01:
        raise PageError(f"{page}: the screenshot is blank ({fraction:.2%} coloured pixels)")
    return dom, fraction

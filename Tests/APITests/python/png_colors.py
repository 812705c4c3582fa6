"""Reads a PNG (8-bit RGB or RGBA, as Chromium writes them) with the standard library and
prints JSON: its size, and how many pixels are near each colour given as RRGGBB."""
import json, struct, sys, zlib

def pixels(path):
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, width = 8, b"", 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        chunk = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, color = struct.unpack(">IIBB", chunk[:10])
            assert depth == 8 and color in (2, 6), f"unsupported PNG: depth {depth}, color type {color}"
            channels = 3 if color == 2 else 4
        elif kind == b"IDAT":
            idat += chunk
        pos += 12 + length
    raw, stride, rows, prev = zlib.decompress(idat), width * channels, [], bytearray(width * channels)
    for y in range(height):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - channels] if i >= channels else 0
            b, c = prev[i], prev[i - channels] if i >= channels else 0
            if f == 1: line[i] = (line[i] + a) & 255
            elif f == 2: line[i] = (line[i] + b) & 255
            elif f == 3: line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c; pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(line); prev = line
    return width, height, channels, rows

width, height, channels, rows = pixels(sys.argv[1])
targets = {c: tuple(int(c[i:i + 2], 16) for i in (0, 2, 4)) for c in sys.argv[2:]}
counts, distinct = {c: 0 for c in targets}, set()
for line in rows:
    for x in range(0, width * channels, channels):
        rgb = (line[x], line[x + 1], line[x + 2])
        distinct.add(rgb)
        for name, t in targets.items():
            if abs(rgb[0] - t[0]) + abs(rgb[1] - t[1]) + abs(rgb[2] - t[2]) < 40: counts[name] += 1
print(json.dumps({"width": width, "height": height, "distinctColors": len(distinct), "near": counts}))

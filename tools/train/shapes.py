"""Images the vision demo is trained on: one coloured shape on a plain, gradient or noisy
background, drawn with Debian's python3-pil and numpy, paired with a short answer ("a red circle").

Every image comes from a numpy Generator, so a seed fixes a whole data set: the trainer draws from
--seed, the evaluation from a seed the trainer never uses (evaluate_vision.py).

Drawing: the shape's mask is drawn at 4x the image size and box-filtered down (anti-aliased edges),
then blended over the background. The shape is 50-85% of the short side, its centre within half
the free space of the image's centre (a tower of this size learns shapes anywhere in the image
much more slowly, for its 16-pixel patches see them at every offset), turned
by a small random angle (at most 12 degrees, so that a square never becomes a diamond); its colour
is a named colour with each channel moved by up to 20.
"""
import math

import numpy as np
from PIL import Image, ImageDraw

SHAPES = ("circle", "square", "triangle", "star", "cross", "diamond")
COLOURS = {
    "red": (220, 40, 40), "green": (40, 170, 60), "blue": (40, 80, 230),
    "yellow": (240, 210, 40), "purple": (150, 60, 190), "orange": (245, 140, 30),
}
QUESTIONS = ("What is in the image?", "What do you see?", "What is this?", "Describe the image.",
             "What is shown here?")
DEFAULT_QUESTION = QUESTIONS[0]
# (height, width) of the training images: 64x64, 2x2 merged tokens; the demo's preprocessor
# resizes every image to about that many pixels. (A run that also drew 96 and 128 pixel sides,
# 9 to 16 tokens, learnt shapes far more slowly: the tower has to learn each scale.)
SIZES = ((64, 64),)
SUPERSAMPLE = 4


def answer(colour, shape):
    return f"{'an' if colour[0] in 'aeiou' else 'a'} {colour} {shape}"


def polygon(shape, cx, cy, r, turn):
    """Vertices of the shape of 'radius' r around (cx, cy), turned by `turn` radians."""
    if shape == "square":
        pts = [(-1, -1), (1, -1), (1, 1), (-1, 1)]
        pts = [(x * 0.8, y * 0.8) for x, y in pts]
    elif shape == "diamond":
        pts = [(0, -1), (0.7, 0), (0, 1), (-0.7, 0)]
    elif shape == "triangle":
        pts = [(math.cos(a), math.sin(a)) for a in (-math.pi / 2 + k * 2 * math.pi / 3 for k in range(3))]
        pts = [(x, y + 0.15) for x, y in pts]
    elif shape == "star":
        pts = [((1.0 if k % 2 == 0 else 0.42) * math.cos(-math.pi / 2 + k * math.pi / 5),
                (1.0 if k % 2 == 0 else 0.42) * math.sin(-math.pi / 2 + k * math.pi / 5)) for k in range(10)]
    elif shape == "cross":
        a, b = 0.3, 0.95
        pts = [(-a, -b), (a, -b), (a, -a), (b, -a), (b, a), (a, a), (a, b), (-a, b), (-a, a), (-b, a),
               (-b, -a), (-a, -a)]
    else:
        raise ValueError(f"unknown shape {shape!r}")
    c, s = math.cos(turn), math.sin(turn)
    return [(cx + r * (x * c - y * s), cy + r * (x * s + y * c)) for x, y in pts]


def shape_mask(shape, h, w, cx, cy, r, turn):
    """Anti-aliased coverage in [0, 1], float32 [h, w]."""
    k = SUPERSAMPLE
    img = Image.new("L", (w * k, h * k), 0)
    draw = ImageDraw.Draw(img)
    if shape == "circle":
        draw.ellipse([(cx - r) * k, (cy - r) * k, (cx + r) * k, (cy + r) * k], fill=255)
    else:
        draw.polygon([(x * k, y * k) for x, y in polygon(shape, cx, cy, r, turn)], fill=255)
    return np.asarray(img.resize((w, h), Image.BOX), dtype=np.float32) / 255.0


def background(rng, h, w):
    """float32 [h, w, 3]: a grey or pale plain colour, a gradient between two of them, or noise."""
    kind = rng.integers(3)

    def colour():
        if rng.random() < 0.7:
            return np.full(3, rng.choice([rng.uniform(0, 70), rng.uniform(170, 255)]), np.float32)
        return rng.uniform(150, 255, 3).astype(np.float32)  # pale tint

    if kind == 0:
        bg = np.broadcast_to(colour(), (h, w, 3)).astype(np.float32)
    elif kind == 1:
        a, b = colour(), colour()
        t = np.linspace(0, 1, w if rng.random() < 0.5 else h, dtype=np.float32)
        t = t[None, :, None] if t.shape[0] == w else t[:, None, None]
        bg = np.broadcast_to(a + (b - a) * t, (h, w, 3)).astype(np.float32)
    else:
        bg = colour() + rng.normal(0, rng.uniform(10, 40), (h, w, 3)).astype(np.float32)
    return np.clip(bg, 0, 255)


def draw(rng, h, w, shape, colour):
    """uint8 [h, w, 3]."""
    bg = background(rng, h, w)
    short = min(h, w)
    r = rng.uniform(0.5, 0.85) * short / 2
    cx = w / 2 + rng.uniform(-0.5, 0.5) * (w / 2 - r)
    cy = h / 2 + rng.uniform(-0.5, 0.5) * (h / 2 - r)
    turn = math.radians(rng.uniform(-12, 12))
    mask = shape_mask(shape, h, w, cx, cy, r, turn)[..., None]
    rgb = np.clip(np.array(COLOURS[colour], np.float32) + rng.uniform(-20, 20, 3), 0, 255)
    img = bg * (1 - mask) + rgb * mask
    return np.clip(np.rint(img), 0, 255).astype(np.uint8)


def sample(rng, size=None):
    """One example: (uint8 image [h, w, 3], colour, shape, question)."""
    h, w = size if size is not None else SIZES[rng.integers(len(SIZES))]
    shape = SHAPES[rng.integers(len(SHAPES))]
    colour = list(COLOURS)[rng.integers(len(COLOURS))]
    q = DEFAULT_QUESTION if rng.random() < 0.5 else QUESTIONS[rng.integers(len(QUESTIONS))]
    return draw(rng, h, w, shape, colour), colour, shape, q


def names_in(text):
    """The colours and shapes an answer names (for scoring)."""
    words = set(text.lower().replace(".", " ").replace(",", " ").split())
    return {c for c in COLOURS if c in words}, {s for s in SHAPES if s in words}

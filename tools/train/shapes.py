"""Images the vision demo is trained on: one coloured shape on a plain, gradient or noisy
background, drawn with Debian's python3-pil and numpy, paired with a short answer ("a red circle").

Every image comes from a numpy Generator, so a seed fixes a whole data set: the trainer draws from
--seed, the evaluation from a seed the trainer never uses (evaluate_vision.py).

Sizes: an image is drawn at some size (drawn_size: square or up to 1:3.5 either way, small to a few
times the processor's budget), then brought to the size the engine's processor gives it
(to_processor: smart_resize within [MIN_PIXELS, MAX_PIXELS], PIL bicubic, which the engine's
resize reproduces bit for bit), so the tower trains on exactly the grids and pixels it will see.

Drawing: the shape's mask is drawn at 4x the image size and box-filtered down (anti-aliased edges),
then blended over the background. The shape is 50-85% of the short side, its centre within half
the free space of the image's centre (a tower of this size learns shapes anywhere in the image
much more slowly, for its 16-pixel patches see them at every offset), turned
by a small random angle (at most 12 degrees, so that a square never becomes a diamond); its colour
is a named colour with each channel moved by up to 20.
"""
import math
import os
import sys

import numpy as np
from PIL import Image, ImageDraw

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures"))
from make_image_fixtures import smart_resize  # noqa: E402  (transformers' rule, the engine's too)

SHAPES = ("circle", "square", "triangle", "star", "cross", "diamond")
COLOURS = {
    "red": (220, 40, 40), "green": (40, 170, 60), "blue": (40, 80, 230),
    "yellow": (240, 210, 40), "purple": (150, 60, 190), "orange": (245, 140, 30),
}
QUESTIONS = ("What is in the image?", "What do you see?", "What is this?", "Describe the image.",
             "What is shown here?")
DEFAULT_QUESTION = QUESTIONS[0]
# (height, width) of the first stage's training images: 64x64, 2x2 merged tokens. (A run from
# scratch that also drew 96 and 128 pixel sides learnt shapes far more slowly: the tower has to
# learn each scale. The second stage starts from a tower that knows 64x64.)
SIZES = ((64, 64),)
SUPERSAMPLE = 4
# The second stage's processor (export_vision.py writes it to preprocessor_config.json "size";
# the shipped first-stage demo has 4096 for both): a photo is brought to at most 14,336 pixels (14 merged tokens of 32x32), so a square one becomes 96x96 (9 tokens), 4:3
# 96x128, 2:1 64x160 and 1:3 192x64: the short side keeps 2 tokens up to an aspect of 3.5
# (at 12,288, 3:1 sat on the edge of falling to one token). A small image is brought up to
# 64x64's worth. Every kept grid has a short side of 64 or 96 pixels, so the shapes' scale
# varies by 1.5x only.
FACTOR = 32
MIN_PIXELS, MAX_PIXELS = 64 * 64, 112 * 128
MAX_ASPECT = 3.5


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


def processed_size(h, w, budget=(MIN_PIXELS, MAX_PIXELS)):
    """(height, width) the engine's processor resizes an h x w image to (budget: min, max pixels)."""
    return smart_resize(h, w, FACTOR, *budget)


def to_processor(img, budget=(MIN_PIXELS, MAX_PIXELS)):
    """uint8 [h, w, 3] -> the image at processed_size, resized as the engine does (PIL bicubic)."""
    rh, rw = processed_size(*img.shape[:2], budget)
    if (rh, rw) == img.shape[:2]:
        return img
    return np.asarray(Image.fromarray(img).resize((rw, rh), Image.BICUBIC))


def drawn_size(rng, square_frac=0.25):
    """A training image's size as drawn: square a `square_frac` of the time, else an aspect log-uniform up to
    MAX_ASPECT either way; an area log-uniform from 48x48 to 2.5x the budget (so some images are
    brought up and many down, as photos are). Sizes whose processed short side is one token
    (a shape of 16-27 pixels) are drawn again."""
    while True:
        aspect = 1.0 if rng.random() < square_frac else math.exp(rng.uniform(-math.log(MAX_ASPECT), math.log(MAX_ASPECT)))
        area = math.exp(rng.uniform(math.log(48 * 48), math.log(2.5 * MAX_PIXELS)))
        h, w = round(math.sqrt(area / aspect)), round(math.sqrt(area * aspect))
        if min(processed_size(h, w)) >= 2 * FACTOR:
            return h, w


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

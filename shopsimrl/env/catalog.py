"""Products and the deterministic catalog generator.

The catalog is synthetic so it needs no download and is a pure function of
(seed, size).  Products come in *families*: a base product plus up to three
siblings in the same category with overlapping attributes, other option values
and other prices.  Those near-duplicates are what make a sloppy agent buy the
wrong thing now and then.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from shopsimrl.env.vocab import (
    ATTRIBUTE_BULLETS,
    BENEFITS,
    BRAND_HEADS,
    BRAND_TAILS,
    BULLET_OPENERS,
    CATEGORIES,
    MODEL_LETTERS,
    Axis,
    Category,
)

SPLITS = ("train", "val", "test")
MAX_ID_PRODUCTS = 1_000_000  # the id space fits this many products
_ID_ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"
_ID_STRIDE = 2_000_000  # ids grow with the row number, so "ties by product id" is "ties by rowid"
_ACRONYMS = {"usb-c": "USB-C", "bpa": "BPA", "pfoa": "PFOA", "gan": "GaN", "spf": "SPF", "led": "LED",
             "uv": "UV", "2k": "2K", "nvme": "NVMe", "ssd": "SSD", "mips": "MIPS", "hi-res": "Hi-Res",
             "oeko-tex": "OEKO-TEX", "non-gmo": "Non-GMO", "20v": "20V", "xl": "XL", "xxl": "XXL"}


@dataclass(frozen=True)
class Product:
    """One catalog product; immutable, so it can be cached and shared across threads.

    ``prices`` holds one price per value of ``price_axis`` (None: that SKU's price
    is unknown), or a single price when the product has no price axis.
    """

    product_id: str
    title: str
    brand: str
    model: str
    category: str
    kind: str
    attributes: tuple[str, ...]
    bullets: tuple[str, ...]
    options: tuple[tuple[str, tuple[str, ...]], ...]
    price_axis: str | None
    prices: tuple[float | None, ...]
    split: str = "train"
    rowid: int = 0

    @property
    def axes(self) -> tuple[str, ...]:
        return tuple(axis for axis, _ in self.options)

    def axis_values(self, axis: str) -> tuple[str, ...]:
        for name, values in self.options:
            if name == axis:
                return values
        return ()

    @property
    def known_prices(self) -> list[float]:
        return [p for p in self.prices if p is not None]

    @property
    def price_min(self) -> float | None:
        known = self.known_prices
        return min(known) if known else None

    @property
    def price_max(self) -> float | None:
        known = self.known_prices
        return max(known) if known else None

    def sku_price(self, selected: Mapping[str, str]) -> float | None:
        """Price of the SKU picked by ``selected``; None when unknown or not yet determined."""
        if self.price_axis is None:
            return self.prices[0]
        value = selected.get(self.price_axis)
        values = self.axis_values(self.price_axis)
        if value not in values:
            return None
        return self.prices[values.index(value)]

    def search_columns(self) -> tuple[str, str, str, str, str, str, str]:
        """The seven indexed columns, in the order of the FTS table (see search.py)."""
        model_tokens = f"{self.model} {self.model.replace('-', '')}"
        option_text = " ; ".join(v for _, values in self.options for v in values)
        return (self.title, self.brand, self.category.replace("›", " "), model_tokens,
                " ; ".join(self.attributes), option_text, " ".join(self.bullets))

    def to_row(self) -> tuple:
        return (self.rowid, self.product_id, self.title, self.brand, self.model, self.category, self.kind,
                json.dumps(self.attributes), json.dumps(self.bullets),
                json.dumps([[a, list(v)] for a, v in self.options]), self.price_axis,
                json.dumps(self.prices), self.price_min, self.price_max, self.split)

    @classmethod
    def from_row(cls, row: tuple) -> Product:
        (rowid, product_id, title, brand, model, category, kind, attributes, bullets, options, price_axis,
         prices, _pmin, _pmax, split) = row
        return cls(product_id=product_id, title=title, brand=brand, model=model, category=category, kind=kind,
                   attributes=tuple(json.loads(attributes)), bullets=tuple(json.loads(bullets)),
                   options=tuple((a, tuple(v)) for a, v in json.loads(options)), price_axis=price_axis,
                   prices=tuple(json.loads(prices)), split=split, rowid=rowid)


def display(phrase: str) -> str:
    """Title-case a vocabulary phrase for titles ("usb-c fast charging" -> "USB-C Fast Charging")."""
    words = []
    for word in phrase.split():
        low = word.casefold()
        if low in _ACRONYMS:
            words.append(_ACRONYMS[low])
        elif word[:1].isalpha():
            words.append("-".join(part[:1].upper() + part[1:] for part in word.split("-")))
        else:
            words.append(word)
    return " ".join(words)


def encode_id(number: int) -> str:
    """ASIN-like id: "B0" + 8 base-36 characters; fixed width keeps text order = number order."""
    chars = []
    for _ in range(8):
        number, digit = divmod(number, 36)
        chars.append(_ID_ALPHABET[digit])
    return "B0" + "".join(reversed(chars))


def _price_round(value: float) -> float:
    """Shelf-style prices ending in .99."""
    return round(max(1.99, round(value) - 0.01), 2)


class CatalogGenerator:
    """Streams products for one seed; the same seed always yields the same sequence."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self._rng = random.Random(f"shopsim-catalog-{seed}")
        combos = [h + t for h in BRAND_HEADS for t in BRAND_TAILS]
        self._brands: dict[str, tuple[str, ...]] = {}
        for category in CATEGORIES:
            self._brands[category.name] = tuple(self._rng.sample(combos, 14))
        self._id_base = self._rng.randrange(36**7, 36**8 - (MAX_ID_PRODUCTS + 1) * _ID_STRIDE)

    def products(self, count: int) -> Iterator[Product]:
        index = 0
        while index < count:
            for product in self._family(index, count):
                yield product
                index += 1

    # -- one family of look-alike products ------------------------------------------------
    def _family(self, start: int, count: int) -> list[Product]:
        rng = self._rng
        category = rng.choice(CATEGORIES)
        kind = rng.choice(category.kinds)
        split = "train" if rng.random() < 0.8 else ("val" if rng.random() < 0.5 else "test")
        size = min(rng.choices((1, 2, 3, 4), weights=(45, 25, 18, 12))[0], count - start)
        base_attrs = rng.sample(category.attributes, rng.randint(3, 5))
        axes: list[Axis] = [] if rng.random() < 0.04 else [
            axis for axis in category.axes if rng.random() < (0.8 if axis.name == "color" else 0.92)]
        low, high = category.price
        family_price = math.exp(rng.uniform(math.log(low), math.log(high)))
        brand = rng.choice(self._brands[category.name])
        out = []
        for j in range(size):
            if j and rng.random() < 0.6:
                brand = rng.choice(self._brands[category.name])
            attrs = base_attrs if j == 0 else self._sibling_attributes(category, base_attrs)
            base_price = family_price * (1.0 if j == 0 else rng.uniform(0.75, 1.35))
            out.append(self._product(start + j, category, kind, brand, attrs, axes, base_price, split))
        return out

    def _sibling_attributes(self, category: Category, base: list[str]) -> list[str]:
        rng = self._rng
        kept = [a for a in base if rng.random() < 0.7]
        others = [a for a in category.attributes if a not in base]
        kept += rng.sample(others, min(len(others), rng.randint(0, 2)))
        while len(kept) < 2:
            extra = rng.choice(category.attributes)
            if extra not in kept:
                kept.append(extra)
        return kept

    def _product(self, index: int, category: Category, kind: str, brand: str, attrs: list[str],
                 axes: list[Axis], base_price: float, split: str) -> Product:
        rng = self._rng
        options: list[tuple[str, tuple[str, ...]]] = []
        price_axis: str | None = None
        prices: list[float | None] = [_price_round(base_price)]
        for axis in axes:
            k = rng.randint(axis.min_values, min(axis.max_values, len(axis.values)))
            picked = sorted(rng.sample(range(len(axis.values)), k))
            values = tuple(axis.values[i] for i in picked)
            options.append((axis.name, values))
            if axis.pricing:
                price_axis = axis.name
                step = rng.uniform(0.12, 0.45)
                prices = []
                for i in picked:
                    price = _price_round(base_price * (1 + step) ** (i - picked[0]))
                    if prices and prices[-1] is not None and price <= prices[-1]:
                        price = prices[-1] + 1.0
                    prices.append(round(price, 2))
                if len(prices) >= 3 and rng.random() < 0.08:
                    prices[rng.randrange(1, len(prices))] = None  # "currently unavailable"
        model = self._model(brand)
        title_attrs = rng.sample(attrs, min(len(attrs), rng.randint(1, 2)))
        audience = f"{display(category.audience)} " if category.audience else ""
        title = f"{brand} {model} {' '.join(display(a) for a in title_attrs)} {audience}{display(kind)}"
        rest = [a for a in attrs if a not in title_attrs]
        if rest and rng.random() < 0.4:
            title += f", {display(rng.choice(rest))}"
        use = rng.choice(category.uses)
        bullets = [rng.choice(BULLET_OPENERS).format(kind=kind, use=use, brand=brand)]
        for attr in rng.sample(attrs, min(len(attrs), rng.randint(2, 4))):
            template = rng.choice(ATTRIBUTE_BULLETS)
            shown = display(attr) if template.startswith("{") else attr
            bullets.append(template.format(attr=shown, benefit=rng.choice(BENEFITS)))
        number = self._id_base + index * _ID_STRIDE + rng.randrange(_ID_STRIDE)
        return Product(product_id=encode_id(number), title=title, brand=brand, model=model,
                       category=category.name, kind=kind, attributes=tuple(attrs), bullets=tuple(bullets),
                       options=tuple(options), price_axis=price_axis, prices=tuple(prices), split=split,
                       rowid=index + 1)

    def _model(self, brand: str) -> str:
        rng = self._rng
        letters = MODEL_LETTERS[sum(map(ord, brand)) % len(MODEL_LETTERS)] + rng.choice(MODEL_LETTERS)
        return f"{letters}-{rng.randint(100, 989)}{rng.choice(('', '', 'X', 'S', 'Pro'))}"

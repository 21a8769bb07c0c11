"""Realistic field values: plates by province, colours, brands and series, face attributes, embeddings.

Every function takes the caller's ``random.Random`` so the whole record stream stays a pure function
of the simulator's seed.
"""

from __future__ import annotations

import math
import random

from contracts.records import FEATURE_DIM, encode_feature

# (province abbreviation, weight): the city's own province dominates, neighbours follow.
PROVINCES = (
    ("浙", 70), ("沪", 6), ("苏", 6), ("皖", 4), ("赣", 3), ("闽", 2), ("京", 1), ("粤", 1), ("鲁", 1),
    ("豫", 1), ("鄂", 1), ("湘", 1), ("川", 1), ("冀", 1), ("晋", 0.5), ("辽", 0.5), ("黑", 0.5),
)
LOCAL_CITY_LETTERS = "AAAAAABCDEFGHJKL"  # 浙A (Hangzhou) most often
PLATE_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ0123456789"  # no I or O on Chinese plates
# (plate colour, weight, vehicle types it goes with)
PLATE_COLORS = (
    ("blue", 70, ("car", "suv", "mpv", "van")),
    ("green", 20, ("car", "suv", "bus")),
    ("yellow", 8, ("truck", "bus", "van")),
    ("white", 1, ("car", "suv")),
    ("black", 1, ("car",)),
)
VEHICLE_COLORS = (("white", 30), ("black", 22), ("silver", 14), ("grey", 12), ("red", 8), ("blue", 8),
                  ("brown", 3), ("green", 2), ("yellow", 1))
BRANDS = {
    "Volkswagen": ("Lavida", "Passat", "Sagitar", "Tiguan L"),
    "Toyota": ("Corolla", "Camry", "RAV4"),
    "Honda": ("Accord", "Civic", "CR-V"),
    "BYD": ("Qin PLUS", "Han", "Song PLUS", "Seagull"),
    "Geely": ("Emgrand", "Boyue", "Xingyue L"),
    "Nissan": ("Sylphy", "Teana", "X-Trail"),
    "Buick": ("Excelle", "GL8", "Regal"),
    "Tesla": ("Model 3", "Model Y"),
    "BMW": ("3 Series", "5 Series", "X3"),
    "Audi": ("A4L", "A6L", "Q5L"),
    "Changan": ("CS75", "Eado"),
    "Foton": ("Aumark",),
    "Yutong": ("ZK6",),
}
BRANDS_FOR_TYPE = {
    "truck": ("Foton",),
    "bus": ("Yutong", "BYD"),
    "van": ("Buick", "Changan"),
}
GENDERS = ("male", "female")
AGE_RANGES = (("0-17", 8), ("18-30", 30), ("31-45", 32), ("46-60", 20), ("60+", 10))
GLASSES = (("none", 60), ("glasses", 32), ("sunglasses", 8))


def weighted(rng: random.Random, table: tuple[tuple, ...]) -> tuple:
    """Pick a row of ``(value, weight, ...)`` by weight."""
    total = sum(row[1] for row in table)
    pick = rng.uniform(0, total)
    for row in table:
        pick -= row[1]
        if pick <= 0:
            return row
    return table[-1]


def plate(rng: random.Random, color: str) -> str:
    """A plate number such as 浙AWL999; green (new-energy) plates have 6 characters after the letter."""
    province = weighted(rng, PROVINCES)[0]
    letter = rng.choice(LOCAL_CITY_LETTERS) if province == "浙" else rng.choice("ABCDEFGH")
    if color == "green":
        tail = rng.choice("DF") + "".join(rng.choice(PLATE_ALPHABET) for _ in range(5))
    else:
        tail = "".join(rng.choice(PLATE_ALPHABET) for _ in range(5))
    return f"{province}{letter}{tail}"


PLATE_TAILS = len(PLATE_ALPHABET) ** 5
_TAIL_STRIDE = 7_368_787
"""A prime, so coprime with 34**5 = 2**5 * 17**5: n -> n * stride mod 34**5 visits every tail once."""


def numbered_plate(drawn: str, n: int) -> str:
    """``drawn`` (a plate from :func:`plate`) with its last five characters replaced by the ``n``-th tail of a
    fixed permutation: distinct ``n`` below 34**5 give distinct plates, and consecutive ones look random.
    One car, one plate: a passer-by's plate reused elsewhere in the city would look like a cloned plate."""
    index = (n % PLATE_TAILS) * _TAIL_STRIDE % PLATE_TAILS
    tail = []
    for _ in range(5):
        index, digit = divmod(index, len(PLATE_ALPHABET))
        tail.append(PLATE_ALPHABET[digit])
    return drawn[:-5] + "".join(tail)


def vehicle_attributes(rng: random.Random) -> dict[str, object]:
    """Everything a vehicle recogniser reports, consistent with itself (yellow plates on trucks, ...)."""
    plate_color, _, types = weighted(rng, PLATE_COLORS)
    vehicle_type = rng.choice(types)
    brand = rng.choice(BRANDS_FOR_TYPE.get(vehicle_type, tuple(BRANDS)))
    seatbelt_odds = 0.93 if vehicle_type in ("car", "suv", "mpv") else 0.8
    return {
        "plate_number": plate(rng, plate_color),
        "plate_color": plate_color,
        "vehicle_color": weighted(rng, VEHICLE_COLORS)[0],
        "vehicle_type": vehicle_type,
        "vehicle_brand": brand,
        "vehicle_series": rng.choice(BRANDS[brand]),
        "inspection_sticker": rng.choice((0, 1, 1, 2, 2, 3)),
        "tissue_box": rng.random() < 0.35,
        "driver_seatbelt": rng.random() < seatbelt_odds,
        "passenger_seatbelt": rng.random() < seatbelt_odds - 0.1,
    }


def face_attributes(rng: random.Random) -> dict[str, object]:
    return {
        "gender": rng.choice(GENDERS),
        "age_range": weighted(rng, AGE_RANGES)[0],
        "glasses": weighted(rng, GLASSES)[0],
        "mask": rng.random() < 0.15,
        "hat": rng.random() < 0.12,
    }


def unit_vector(rng: random.Random) -> list[float]:
    vector = [rng.gauss(0.0, 1.0) for _ in range(FEATURE_DIM)]
    return _normalised(vector)


def _normalised(vector: list[float]) -> list[float]:
    norm = math.sqrt(math.fsum(x * x for x in vector)) or 1.0
    return [x / norm for x in vector]


def feature(rng: random.Random, identity: list[float] | None = None, noise: float = 0.15) -> str:
    """A face embedding: random for a passer-by, or ``identity`` plus a little noise for a known face.

    With ``noise`` 0.15 two sightings of the same person have cosine similarity ~0.98, while two
    strangers are near 0 (128 dimensions): what a watchlist matcher needs to tell them apart.
    """
    if identity is None:
        return encode_feature(unit_vector(rng))
    scale = noise / math.sqrt(FEATURE_DIM)
    return encode_feature(_normalised([x + rng.gauss(0.0, scale) for x in identity]))

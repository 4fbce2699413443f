"""The fixed vocabulary the catalog generator draws from: departments, product kinds,
attributes, option axes and price bands.

Everything here is an immutable constant, so the catalog is a pure function of
(seed, size).  Values were chosen so that the reward's fuzzy matcher
(token-set ratio > 85) never confuses two different values of one category:
no option value of a category fuzzy-matches another, and no attribute's tokens
are a subset of another attribute's.  ``tests/env/test_vocab.py`` checks it.
"""

from __future__ import annotations

from dataclasses import dataclass

SEP = " › "  # category path separator ("Clothing › Men › Shoes")


@dataclass(frozen=True)
class Axis:
    """One option axis ("size", "color"...) and the pool its values come from.

    ``pricing`` marks the axes that may drive the price (at most one per product);
    their pool is ordered from cheapest to dearest.
    """

    name: str
    values: tuple[str, ...]
    pricing: bool = False
    min_values: int = 2
    max_values: int = 5


@dataclass(frozen=True)
class Category:
    path: tuple[str, ...]
    kinds: tuple[str, ...]  # product nouns, e.g. "hiking boots"
    audience: str  # "" or e.g. "men's", used in titles and instructions
    attributes: tuple[str, ...]
    axes: tuple[Axis, ...]
    price: tuple[float, float]  # base price band in dollars
    uses: tuple[str, ...]  # short use cases for bullets

    @property
    def name(self) -> str:
        return SEP.join(self.path)


COLORS = ("black", "white", "navy", "grey", "charcoal", "olive", "burgundy", "beige", "tan", "brown",
          "red", "forest green", "royal blue", "blush pink", "mustard", "teal", "ivory", "lavender")
APPAREL_SIZES = ("XS", "S", "M", "L", "XL", "XXL")
KIDS_SIZES = ("2T", "3T", "4T", "5", "6", "7", "8", "10", "12", "14")
SHOE_SIZES = ("6", "6.5", "7", "7.5", "8", "8.5", "9", "9.5", "10", "10.5", "11", "12", "13")
PACKS = ("single", "two pack", "three pack", "four pack", "six pack", "twelve pack")


def _color(max_values: int = 5) -> Axis:
    return Axis("color", COLORS, pricing=False, min_values=2, max_values=max_values)


CATEGORIES: tuple[Category, ...] = (
    Category(("Clothing", "Men", "Shoes"), ("hiking boots", "running shoes", "sneakers", "loafers", "chelsea boots"),
             "men's", ("waterproof", "slip resistant", "breathable mesh", "full grain leather", "memory foam insole",
                       "lightweight", "arch support", "vegan", "wide fit", "steel toe"),
             (Axis("size", SHOE_SIZES, max_values=7), _color(4)), (25, 160),
             ("trail hiking", "daily commuting", "long walks", "the gym")),
    Category(("Clothing", "Women", "Dresses"), ("maxi dress", "midi dress", "wrap dress", "shift dress", "sundress"),
             "women's", ("organic cotton", "linen", "machine washable", "side pockets", "stretch fabric",
                         "floral print", "v-neck", "sleeveless", "wrinkle free", "lined"),
             (Axis("size", APPAREL_SIZES, max_values=6), _color()), (20, 120),
             ("summer parties", "the office", "weddings", "beach days")),
    Category(("Clothing", "Men", "Shirts"), ("oxford shirt", "t-shirt", "polo shirt", "flannel shirt", "henley"),
             "men's", ("organic cotton", "slim fit", "moisture wicking", "wrinkle free", "short sleeve",
                       "long sleeve", "button down collar", "relaxed fit", "tagless", "pre-shrunk"),
             (Axis("size", APPAREL_SIZES, max_values=6), _color(),
              Axis("pack", PACKS[:4], pricing=True, min_values=2, max_values=3)), (12, 70),
             ("work", "weekends", "layering", "travel")),
    Category(("Clothing", "Women", "Activewear"), ("leggings", "sports bra", "yoga pants", "running shorts", "tank top"),
             "women's", ("high waisted", "moisture wicking", "squat proof", "four-way stretch", "hidden pocket",
                         "quick dry", "seamless", "racerback", "compression", "reflective trim"),
             (Axis("size", APPAREL_SIZES, max_values=6), _color()), (15, 90),
             ("yoga", "running", "gym workouts", "pilates")),
    Category(("Clothing", "Kids", "Outerwear"), ("rain jacket", "puffer jacket", "fleece jacket", "snow pants",
                                                  "winter coat"),
             "kids'", ("waterproof", "hooded", "insulated", "reflective strips", "packable", "windproof",
                       "fleece lined", "machine washable", "zip pockets", "recycled polyester"),
             (Axis("size", KIDS_SIZES, max_values=6), _color()), (20, 110),
             ("school days", "rainy walks", "snow play", "camping trips")),
    Category(("Home & Kitchen", "Kitchen", "Cookware"), ("frying pan", "saucepan", "dutch oven", "wok", "stockpot"),
             "", ("nonstick", "induction compatible", "dishwasher safe", "cast iron", "stainless steel",
                  "oven safe", "pfoa free", "glass lid", "tri-ply", "stay-cool handle"),
             (Axis("size", ("8in", "10in", "11in", "12in", "14in"), pricing=True, max_values=4),
              _color(4)), (18, 180),
             ("searing", "everyday cooking", "braising", "family meals")),
    Category(("Home & Kitchen", "Kitchen", "Small Appliances"), ("blender", "coffee maker", "air fryer",
                                                                  "electric kettle", "toaster"),
             "", ("bpa free", "programmable", "brushed steel", "dishwasher safe parts", "auto shut-off", "compact",
                  "digital display", "quiet motor", "keep warm", "one-touch"),
             (Axis("capacity", ("0.8L", "1.2L", "1.7L", "2.5L", "4L", "6L"), pricing=True, max_values=4),
              _color(4)), (25, 220),
             ("busy mornings", "tiny kitchens", "meal prep", "dorm rooms")),
    Category(("Home & Kitchen", "Bedding", "Sheets"), ("sheet set", "duvet cover", "pillowcases", "fitted sheet",
                                                       "quilt"),
             "", ("organic cotton", "deep pocket", "hypoallergenic", "cooling", "wrinkle resistant",
                  "bamboo viscose", "400 thread count", "sateen weave", "oeko-tex certified", "percale"),
             (Axis("size", ("twin", "twin-xl", "full", "queen", "king", "cal-king"), pricing=True, max_values=5),
              _color()), (25, 200),
             ("hot sleepers", "guest rooms", "kids' rooms", "every season")),
    Category(("Home & Kitchen", "Furniture", "Office Chairs"), ("office chair", "gaming chair", "desk chair",
                                                               "drafting stool", "task chair"),
             "", ("lumbar support", "adjustable height", "mesh back", "360 swivel", "padded armrests",
                  "headrest", "easy assembly", "tilt lock", "rolling casters", "bonded leather"),
             (_color(5),), (60, 400),
             ("long work days", "home offices", "gaming sessions", "study rooms")),
    Category(("Home & Kitchen", "Bath", "Towels"), ("bath towels", "hand towels", "beach towel", "washcloths",
                                                    "bath sheet"),
             "", ("quick dry", "highly absorbent", "turkish cotton", "organic cotton", "plush", "lint free",
                  "oeko-tex certified", "hotel quality", "fade resistant", "ring spun"),
             (Axis("pack", ("two pack", "four pack", "six pack", "eight pack"), pricing=True, max_values=3),
              _color()), (15, 90),
             ("the bathroom", "the gym", "the pool", "guests")),
    Category(("Electronics", "Audio", "Headphones"), ("wireless earbuds", "over-ear headphones",
                                                      "on-ear headphones", "sports earbuds", "studio headphones"),
             "", ("bluetooth 5.3", "noise cancelling", "sweat resistant", "40-hour battery", "built-in microphone",
                  "fast charging", "foldable", "transparency mode", "multipoint pairing", "hi-res audio"),
             (Axis("color", ("black", "white", "navy", "silver", "rose gold", "midnight green"), max_values=4),),
             (20, 350),
             ("commuting", "workouts", "calls", "long flights")),
    Category(("Electronics", "Computers", "Storage"), ("external ssd", "usb flash drive", "portable hard drive",
                                                       "microsd card", "nvme ssd"),
             "", ("usb-c", "shock resistant", "hardware encryption", "high speed", "pocket size",
                  "password protection", "thunderbolt", "backup software", "aluminum casing", "heat sink"),
             (Axis("capacity", ("64GB", "128GB", "256GB", "512GB", "1TB", "2TB", "4TB"), pricing=True,
                   min_values=3, max_values=5),), (10, 300),
             ("photo backups", "video editing", "gaming consoles", "travel")),
    Category(("Electronics", "Accessories", "Chargers"), ("wall charger", "power bank", "wireless charger",
                                                          "car charger", "charging station"),
             "", ("fast charging", "usb-c", "gan", "foldable plug", "overcharge protection", "compact",
                  "magsafe compatible", "led indicator", "dual port", "travel ready"),
             (Axis("pack", PACKS[:4], pricing=True, max_values=3), _color(3)), (10, 90),
             ("phones", "tablets", "road trips", "desks")),
    Category(("Electronics", "Smart Home", "Cameras"), ("security camera", "video doorbell", "baby monitor",
                                                        "pet camera", "floodlight camera"),
             "", ("night vision", "two-way audio", "motion detection", "weatherproof", "2k resolution",
                  "works with alexa", "local storage", "no subscription", "pan and tilt", "battery powered"),
             (Axis("pack", ("single", "two pack", "three pack", "four pack"), pricing=True, max_values=3),
              Axis("color", ("black", "white"), min_values=2, max_values=2)), (25, 250),
             ("porches", "nurseries", "garages", "backyards")),
    Category(("Sports & Outdoors", "Camping", "Tents"), ("dome tent", "backpacking tent", "pop-up tent",
                                                         "cabin tent", "beach tent"),
             "", ("waterproof", "ultralight", "easy setup", "rainfly included", "mesh windows",
                  "double wall", "carry bag", "taped seams", "freestanding", "uv protection"),
             (Axis("capacity", ("one-person", "two-person", "four-person", "six-person", "eight-person"),
                   pricing=True, max_values=4), _color(3)), (40, 450),
             ("backpacking", "family camping", "festivals", "the beach")),
    Category(("Sports & Outdoors", "Fitness", "Yoga"), ("yoga mat", "yoga block", "resistance bands",
                                                        "foam roller", "yoga strap"),
             "", ("non-slip", "eco friendly", "extra thick", "lightweight", "sweat resistant", "carrying strap",
                  "natural rubber", "alignment lines", "latex free", "high density"),
             (Axis("thickness", ("3mm", "5mm", "8mm", "10mm"), pricing=True, max_values=3), _color()), (10, 110),
             ("hot yoga", "home workouts", "stretching", "physical therapy")),
    Category(("Sports & Outdoors", "Cycling", "Accessories"), ("bike helmet", "bike light", "bike lock",
                                                               "cycling gloves", "bike pump"),
             "", ("rechargeable", "reflective", "lightweight", "adjustable fit", "ventilated", "waterproof",
                  "quick release", "mips protection", "anti-theft", "frame mount"),
             (Axis("size", ("S", "M", "L", "XL"), max_values=3), _color(4)), (12, 140),
             ("city commuting", "mountain trails", "night rides", "road cycling")),
    Category(("Beauty", "Skin Care", "Moisturizers"), ("face moisturizer", "night cream", "eye cream",
                                                      "body lotion", "face serum"),
             "", ("fragrance free", "hyaluronic acid", "spf 30", "vegan", "cruelty free", "for sensitive skin",
                  "non-comedogenic", "vitamin c", "ceramides", "oil free"),
             (Axis("size", ("0.5oz", "1.7oz", "3.4oz", "5oz"), pricing=True, max_values=3),
              Axis("pack", ("single", "two pack", "three pack"), min_values=2, max_values=2)), (8, 90),
             ("dry skin", "daily use", "winter months", "morning routines")),
    Category(("Beauty", "Hair Care", "Shampoo"), ("shampoo", "conditioner", "hair mask", "dry shampoo",
                                                  "leave-in conditioner"),
             "", ("sulfate free", "paraben free", "for curly hair", "color safe", "argan oil", "vegan",
                  "tea tree", "volumizing", "keratin", "salon grade"),
             (Axis("size", ("2oz", "8.5oz", "16.9oz", "33.8oz"), pricing=True, max_values=3),),
             (6, 60),
             ("daily washing", "damaged hair", "oily scalps", "travel")),
    Category(("Grocery", "Beverages", "Coffee"), ("whole bean coffee", "ground coffee", "coffee pods",
                                                  "cold brew concentrate", "instant coffee"),
             "", ("organic", "fair trade", "dark roast", "medium roast", "decaf", "single origin", "kosher",
                  "low acid", "small batch", "rainforest alliance"),
             (Axis("size", ("12oz", "2lb", "5lb"), pricing=True, min_values=2, max_values=3),
              Axis("pack", ("single", "two pack", "four pack"), min_values=2, max_values=2)), (8, 60),
             ("espresso", "french press", "drip machines", "office kitchens")),
    Category(("Grocery", "Snacks", "Nuts & Seeds"), ("almonds", "cashews", "trail mix", "pistachios", "mixed nuts"),
             "", ("unsalted", "dry roasted", "raw", "non-gmo", "gluten free", "keto friendly", "resealable bag",
                  "sea salt", "no added sugar", "vegan"),
             (Axis("size", ("8oz", "16oz", "3lb", "5lb"), pricing=True, max_values=3),), (6, 50),
             ("lunch boxes", "hiking trips", "baking", "snacking at work")),
    Category(("Pet Supplies", "Dogs", "Beds"), ("dog bed", "crate pad", "donut dog bed", "pillow dog bed",
                                                "elevated dog bed"),
             "", ("orthopedic", "washable cover", "waterproof liner", "non-skid bottom", "memory foam",
                  "bolster sides", "chew resistant", "cooling gel", "machine washable", "raised edges"),
             (Axis("size", ("small", "medium", "large", "x-large", "jumbo"), pricing=True, max_values=4),
              _color(4)), (20, 180),
             ("senior dogs", "crates", "puppies", "big breeds")),
    Category(("Pet Supplies", "Cats", "Litter"), ("clumping cat litter", "litter box", "litter mat",
                                                  "crystal cat litter", "litter scoop"),
             "", ("unscented", "low dust", "odor control", "lightweight", "plant based", "multi-cat",
                  "flushable", "easy scoop", "high sides", "activated charcoal"),
             (Axis("size", ("10lb", "18lb", "25lb", "40lb"), pricing=True, max_values=3),), (8, 70),
             ("busy households", "apartments", "kittens", "senior cats")),
    Category(("Toys & Games", "Building", "Blocks"), ("building blocks set", "magnetic tiles", "marble run",
                                                      "construction kit", "brick set"),
             "", ("bpa free", "stem educational", "ages 3+", "storage bin included", "compatible with major brands",
                  "glow in the dark", "non-toxic", "instruction booklet", "wooden", "travel case"),
             (Axis("pieces", ("60", "150", "320", "750", "1400"), pricing=True,
                   max_values=3),), (12, 120),
             ("classrooms", "birthday gifts", "rainy days", "family game night")),
    Category(("Office Products", "Writing", "Pens"), ("gel pens", "ballpoint pens", "fountain pen", "highlighters",
                                                      "fineliner pens"),
             "", ("quick dry", "smear proof", "fine point", "refillable", "assorted colors", "archival ink",
                  "retractable", "comfort grip", "acid free", "bold point"),
             (Axis("pack", ("single", "four pack", "twelve pack", "thirty-six pack"), pricing=True, max_values=3),
              Axis("ink", ("black", "blue", "red", "green", "purple"), min_values=2, max_values=4)), (5, 45),
             ("note taking", "journaling", "office work", "school")),
    Category(("Tools & Home Improvement", "Power Tools", "Drills"), ("cordless drill", "impact driver",
                                                                     "hammer drill", "drill driver",
                                                                     "right angle drill"),
             "", ("brushless motor", "lithium ion", "led work light", "variable speed", "keyless chuck",
                  "belt clip", "two-speed gearbox", "compact head", "hard case", "20v max"),
             (Axis("kit", ("tool only", "with battery", "with two batteries", "combo kit"), pricing=True,
                   max_values=3),), (40, 300),
             ("furniture assembly", "deck building", "home repairs", "job sites")),
    Category(("Automotive", "Interior", "Seat Covers"), ("car seat covers", "floor mats", "steering wheel cover",
                                                         "windshield sunshade", "cargo liner"),
             "", ("universal fit", "all weather", "non-slip backing", "breathable", "easy to clean",
                  "airbag compatible", "faux leather", "trim to fit", "odorless", "pet friendly"),
             (Axis("fit", ("front seats", "full set", "rear bench"), pricing=True, min_values=2, max_values=3),
              _color(4)), (15, 150),
             ("daily commutes", "road trips", "families with kids", "dog owners")),
)

# Words the instruction generator and the search/reward tokenizers treat as noise.
STOP_WORDS = frozenset(
    """a an and are as at be but by for from has have i i'm im in into is it its me my of on or our so some
    that the their them these this those to too was we were will with would you your s find get need needs want
    wants looking look please can could buy show like also one something which who am ideally should must
    price priced lower less than under around about roughly approximately between dollars dollar usd bucks
    budget cost costs costing max maximum up range more no not per each""".split()
)

# Bullet templates; ``{kind}``, ``{use}``, ``{brand}``, ``{attr}`` are filled in.  Their own
# words avoid the attribute, kind and option vocabulary on purpose: filler that
# shares a word with a query ("easy", "support"...) would put most of the catalog
# in every OR-query's match set, which costs ranking time and relevance.
BULLET_OPENERS = (
    "Designed for {use}: this {kind} keeps up with everyday life",
    "Made by {brand} with careful attention to detail",
    "A dependable {kind} you can reach for again and again",
    "Backed by a one-year {brand} warranty",
    "Thoughtful details make this {kind} a favorite for {use}",
    "Tested by our team for {use} before it ever reaches you",
)
ATTRIBUTE_BULLETS = (
    "{attr}: {benefit}",
    "Features {attr}, {benefit}",
    "{attr} by design, {benefit}",
)
BENEFITS = (
    "there whenever you need it",
    "made to last season after season",
    "a joy to own",
    "an upgrade you will notice every day",
    "loved by thousands of happy customers",
    "comfortable from day one",
)

BRAND_HEADS = ("Trail", "Nord", "Vita", "Lumi", "Oak", "Brisk", "Zen", "Cobalt", "Juniper", "Maple", "Peak",
               "River", "Solis", "Terra", "Vero", "Kinda", "Alto", "Bexley", "Cedar", "Drift", "Ember", "Fable",
               "Granite", "Harbor", "Iris", "Kestrel", "Lark", "Mosaic", "Nimbus", "Orca", "Pioneer", "Quill")
BRAND_TAILS = ("peak", "ware", "ly", "co", "forge", "nest", "craft", "works", "line", "field", "stone", "wave",
               "wood", "lab", "mark", "gear", "home", "point", "vale", "well")
MODEL_LETTERS = "ABCDEFGHJKLMNPRSTVWXZ"

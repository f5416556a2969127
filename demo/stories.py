#!/usr/bin/env python3
"""Generate simple children's stories from a small seeded grammar.

Usage:
    python3 demo/stories.py --seed 1234 --count 9000 --out demo/stories.txt

Every story is written on one line; stories are separated by newlines.
The same seed always gives the same text. Only the standard library is used.

A story is built from a cast (a main character and a friend, each a child or
a small animal with a name and pronouns), a place, an object with a colour,
and one of several plots. Each plot has a beginning, a problem, a turn and an
ending, and every sentence has a few interchangeable wordings, so the model
must learn how a story hangs together rather than memorise a few texts.
"""

import argparse
import random

GIRL_NAMES = ["Lily", "Mia", "Anna", "Lucy", "Sue", "Zoe", "Ella", "Rosa",
              "Nina", "Ivy", "Kate", "Amy", "Molly", "Daisy", "Ruby", "Emma",
              "Sara", "Jill", "Maya", "Bella"]
BOY_NAMES = ["Tom", "Ben", "Sam", "Max", "Tim", "Jack", "Leo", "Finn",
             "Milo", "Omar", "Joe", "Dan", "Bob", "Ted", "Nick", "Oscar",
             "Luke", "Hugo", "Adam", "Pete"]

# a girl is always "she", a boy "he"; an animal gets either
KINDS = ["girl", "boy", "bunny", "puppy", "kitten", "bear", "duck", "fox",
         "mouse", "frog", "pig", "owl", "turtle", "lamb", "squirrel"]

TRAITS = ["little", "happy", "kind", "curious", "shy", "brave", "silly",
          "small", "friendly", "cheerful", "clever", "gentle"]

COLORS = ["red", "blue", "yellow", "green", "pink", "purple", "orange",
          "white", "brown", "shiny"]

# object, verb phrase for playing with it
OBJECTS = [
    ("ball", "kicked the ball"),
    ("kite", "flew the kite"),
    ("teddy bear", "hugged the teddy bear"),
    ("hat", "wore the hat"),
    ("toy boat", "sailed the toy boat"),
    ("book", "read the book"),
    ("drum", "played the drum"),
    ("doll", "played with the doll"),
    ("toy car", "raced the toy car"),
    ("balloon", "held the balloon"),
    ("scarf", "wore the scarf"),
    ("wagon", "pulled the wagon"),
]

# place, things seen there, hiding spots there
PLACES = [
    ("the park", ["tall trees", "a big slide", "green grass"],
     ["under a bench", "behind a tree", "next to the slide"]),
    ("the forest", ["tall trees", "soft moss", "little birds"],
     ["under a log", "behind a big rock", "in a pile of leaves"]),
    ("the garden", ["red flowers", "busy bees", "green beans"],
     ["under a bush", "behind the flower pots", "near the gate"]),
    ("the beach", ["soft sand", "blue waves", "pretty shells"],
     ["under the sand", "behind a rock", "next to a sand castle"]),
    ("the farm", ["a big barn", "fat cows", "yellow hay"],
     ["in the hay", "behind the barn", "next to the fence"]),
    ("the meadow", ["many flowers", "tall grass", "white butterflies"],
     ["in the tall grass", "under a flower", "behind a stone"]),
    ("the pond", ["green frogs", "lily pads", "little fish"],
     ["under a lily pad", "near the reeds", "behind a stone"]),
    ("the hill", ["a windy top", "soft grass", "a view of the town"],
     ["behind a bush", "under a tree", "in the grass"]),
]

FEEL_GOOD = ["happy", "glad", "very happy", "proud"]
FEEL_BAD = ["sad", "very sad", "upset", "worried"]

GAMES = ["hide and seek", "tag", "catch", "a game of chase", "jump rope"]
ADULTS = [("Mom", "she"), ("Dad", "he"), ("Grandma", "she"), ("Grandpa", "he")]

SNACKS = ["apples", "cookies", "sandwiches", "berries", "cake", "carrots"]


class Char:
    def __init__(self, rng, avoid=()):
        while True:
            kind = rng.choice(KINDS)
            if kind == "girl":
                girl = True
            elif kind == "boy":
                girl = False
            else:
                girl = rng.random() < 0.5
            name = rng.choice(GIRL_NAMES if girl else BOY_NAMES)
            if name not in avoid:
                break
        self.kind = kind
        self.name = name
        self.he = "she" if girl else "he"
        self.him = "her" if girl else "him"
        self.his = "her" if girl else "his"
        self.trait = rng.choice(TRAITS)

    @property
    def He(self):
        return self.he.capitalize()

    @property
    def His(self):
        return self.his.capitalize()

    def a_desc(self):
        t = self.trait
        art = "an" if t[0] in "aeiou" else "a"
        return f"{art} {t} {self.kind} named {self.name}"


def pick(rng, *options):
    return rng.choice(options)


def opening(rng, a, place_name):
    r = rng.random()
    if r < 0.75:
        return pick(rng,
                    f"Once upon a time, there was {a.a_desc()}.",
                    f"Once upon a time, in a small town, there lived {a.a_desc()}.",
                    f"Once upon a time, {a.a_desc()} lived near {place_name}.")
    if r < 0.9:
        return f"One day, {a.a_desc()} woke up early."
    return f"There once was {a.a_desc()}."


def ending(rng, a, b=None):
    who = f"{a.name} and {b.name}" if b else a.name
    return pick(rng,
                "The end.",
                f"From that day on, {who} were always happy." if b else
                f"From that day on, {a.name} was always happy.",
                f"It was a very good day for {who}. The end.",
                f"And {who} lived happily ever after.")


def plot_lost(rng, a, b, place, obj, color):
    pname, sights, spots = place
    oname, play = obj
    s = [opening(rng, a, pname)]
    s.append(pick(rng,
                  f"{a.name} had a {color} {oname}. {a.He} loved it very much.",
                  f"{a.His} favorite toy was a {color} {oname}."))
    s.append(f"One day, {a.name} went to {pname} with the {oname}.")
    s.append(pick(rng,
                  f"There were {rng.choice(sights)} and {rng.choice(sights)}.",
                  f"{a.He} saw {rng.choice(sights)}.",
                  f"The sun was warm and the sky was blue."))
    s.append(f"{a.name} {play} all morning.")
    s.append(pick(rng,
                  f"But then {a.he} could not find the {oname}!",
                  f"When it was time to go home, the {oname} was gone!"))
    s.append(f"{a.name} felt {rng.choice(FEEL_BAD)}. {a.He} started to cry.")
    s.append(f"{b.a_desc()[0].upper() + b.a_desc()[1:]} came by.")
    s.append(f"\"Why are you crying?\" asked {b.name}.")
    s.append(f"\"I lost my {oname},\" said {a.name}.")
    s.append(pick(rng, f"\"Do not worry. I will help you look,\" said {b.name}.",
                  f"\"Let us look for it together,\" said {b.name}."))
    wrong, right = rng.sample(spots, 2)
    s.append(f"They looked {wrong}, but the {oname} was not there.")
    s.append(f"Then {b.name} looked {right}. \"I found it!\" {b.he} said.")
    s.append(f"{a.name} was {rng.choice(FEEL_GOOD)}. \"Thank you, {b.name}!\" {a.he} said.")
    s.append(pick(rng,
                  f"{a.name} and {b.name} played with the {oname} until the sun went down.",
                  f"After that, {a.name} and {b.name} became good friends."))
    s.append(ending(rng, a, b))
    return s


def plot_brave(rng, a, b, place, obj, color):
    pname, sights, spots = place
    task = rng.choice([
        ("climb the big tree", "climbed the big tree", "the branches were high"),
        ("swim in the pond", "swam in the pond", "the water looked deep"),
        ("go down the big slide", "went down the big slide", "the slide was very tall"),
        ("walk over the old bridge", "walked over the old bridge", "the bridge was long"),
        ("sing a song for everyone", "sang a song for everyone", "there were so many people"),
        ("ride a bike", "rode the bike", "the bike was wobbly"),
    ])
    want, did, fear = task
    adult, ahe = rng.choice(ADULTS)
    helper = b.name if rng.random() < 0.5 else adult
    s = [opening(rng, a, pname)]
    s.append(f"{a.name} wanted to {want}.")
    s.append(f"But {fear}, and {a.name} was scared.")
    s.append(pick(rng,
                  f"\"What if I fall?\" {a.he} said.",
                  f"\"I can not do it,\" {a.he} said."))
    s.append(f"{helper} saw that {a.name} was scared.")
    s.append(pick(rng,
                  f"\"You can do it,\" said {helper}. \"I will stay with you.\"",
                  f"\"Be brave,\" said {helper}. \"Try one small step.\""))
    s.append(f"{a.name} took a deep breath.")
    s.append(pick(rng,
                  f"{a.He} tried once, and then {a.he} tried again.",
                  f"{a.He} went slowly, one step at a time."))
    s.append(f"At last, {a.name} {did}!")
    s.append(f"{a.He} felt {rng.choice(['proud', 'very proud', 'happy and proud'])}.")
    s.append(pick(rng,
                  f"\"Thank you, {helper},\" said {a.name}. \"I was brave!\"",
                  f"{helper} gave {a.name} a big hug."))
    s.append(pick(rng,
                  f"{a.name} learned that being brave means trying even when you are scared.",
                  f"Now {a.name} was not scared any more."))
    s.append(ending(rng, a))
    return s


def plot_share(rng, a, b, place, obj, color):
    pname, sights, spots = place
    oname, play = obj
    s = [opening(rng, a, pname)]
    s.append(f"{a.name} had a new {color} {oname}.")
    s.append(f"{a.He} took it to {pname} to play.")
    s.append(f"There {a.he} met {b.name}, {b.a_desc().split(' named ')[0]}.")
    s.append(f"\"Can I play with your {oname}?\" asked {b.name}.")
    s.append(pick(rng,
                  f"\"No, it is mine,\" said {a.name}.",
                  f"\"No! You can not have it,\" said {a.name}."))
    s.append(f"{b.name} felt {rng.choice(FEEL_BAD)} and walked away.")
    s.append(f"{a.name} {play} alone, but it was not fun.")
    s.append(pick(rng,
                  f"{a.He} thought about {b.name}.",
                  f"{a.He} felt bad inside."))
    s.append(f"So {a.name} ran to {b.name} and said, \"I am sorry. Let us play together.\"")
    s.append(f"{b.name} smiled. They {play.split(' ', 1)[0]} the {oname} together and played {rng.choice(GAMES)}.")
    s.append(pick(rng,
                  f"It was much more fun with a friend.",
                  f"They laughed and laughed."))
    s.append(f"{a.name} learned that sharing makes everyone happy.")
    s.append(ending(rng, a, b))
    return s


def plot_rain(rng, a, b, place, obj, color):
    pname, sights, spots = place
    adult, ahe = rng.choice(ADULTS)
    snack = rng.choice(SNACKS)
    activity = rng.choice([
        ("build a fort with blankets", "built a big fort with blankets and pillows"),
        ("bake cookies", "baked cookies and made a big mess"),
        ("paint pictures", "painted pictures of the sun and the sky"),
        ("play a game", f"played {rng.choice(['a card game', 'a board game', 'a guessing game'])}"),
        ("read a story", "read a story about a dragon and a king"),
    ])
    s = [opening(rng, a, pname)]
    s.append(f"{a.name} and {a.his} friend {b.name} wanted to have a picnic at {pname}.")
    s.append(f"They packed {snack} in a basket.")
    s.append(pick(rng,
                  f"But when they looked outside, it was raining.",
                  f"But then dark clouds came, and it started to rain."))
    s.append(f"{a.name} and {b.name} felt {rng.choice(FEEL_BAD)}.")
    s.append(f"\"Now we can not go to {pname},\" said {b.name}.")
    s.append(f"{adult} saw them and said, \"Why don't you {activity[0]}?\"")
    s.append(f"So they {activity[1]}.")
    s.append(pick(rng,
                  f"Then they ate the {snack} on the floor. It was a picnic inside!",
                  f"They had the picnic in the house and ate all the {snack}."))
    s.append(f"They had so much fun that they forgot about the rain.")
    s.append(pick(rng,
                  f"The next day, the sun came out, and they went to {pname} after all.",
                  f"\"This was the best day,\" said {a.name}."))
    s.append(ending(rng, a, b))
    return s


def plot_help(rng, a, b, place, obj, color):
    pname, sights, spots = place
    trouble = rng.choice([
        ("a baby bird", "had fallen out of its nest", "put it back in its nest"),
        ("a little kitten", "was stuck up a tree", "helped it climb down"),
        ("a small duck", "was stuck in the mud", "pulled it out of the mud"),
        ("a tiny puppy", "was lost and alone", "took it home to its family"),
        ("a little bee", "was caught in a web", "set it free"),
    ])
    animal, problem, fix = trouble
    s = [opening(rng, a, pname)]
    s.append(f"One morning, {a.name} went for a walk in {pname}.")
    s.append(f"{a.He} saw {rng.choice(sights)}.")
    s.append(f"Then {a.name} heard a small sound. It was {animal}. It {problem}.")
    s.append(f"The {animal.split()[-1]} was scared.")
    s.append(pick(rng,
                  f"\"Don't be scared. I will help you,\" said {a.name}.",
                  f"{a.name} wanted to help."))
    s.append(pick(rng,
                  f"{a.He} was too small to do it alone, so {a.he} asked {b.name} to help.",
                  f"{a.He} called {a.his} friend {b.name}, and they worked together."))
    s.append(f"Slowly and gently, they {fix}.")
    s.append(f"The {animal.split()[-1]} was safe! It looked at {a.name} and {b.name} as if to say thank you.")
    s.append(f"{a.name} felt {rng.choice(FEEL_GOOD)} inside.")
    s.append(pick(rng,
                  f"Helping others is a good thing to do.",
                  f"After that, the {animal.split()[-1]} came to visit them every day."))
    s.append(ending(rng, a, b))
    return s


def plot_friend(rng, a, b, place, obj, color):
    pname, sights, spots = place
    game = rng.choice(GAMES)
    s = [opening(rng, a, pname)]
    s.append(f"{a.name} was new in town and did not have any friends.")
    s.append(f"One day, {a.he} went to {pname}. There were {rng.choice(sights)}.")
    s.append(f"{a.name} saw {b.name}, {b.a_desc().split(' named ')[0]}, sitting alone.")
    s.append(f"{a.name} felt shy. {a.He} did not know what to say.")
    s.append(pick(rng,
                  f"But {a.he} walked over and said, \"Hello! My name is {a.name}.\"",
                  f"At last {a.he} said, \"Hi, I am {a.name}. Do you want to play?\""))
    s.append(f"{b.name} smiled. \"I am {b.name}. Let us play {game}!\"")
    s.append(f"They played {game} all afternoon.")
    s.append(pick(rng,
                  f"They laughed and ran and had so much fun.",
                  f"Then they sat in the shade and shared {rng.choice(SNACKS)}."))
    s.append(f"When it was time to go home, {b.name} said, \"Will you come back tomorrow?\"")
    s.append(f"\"Yes!\" said {a.name}. {a.He} was not shy any more.")
    s.append(f"{a.name} and {b.name} became best friends.")
    s.append(ending(rng, a, b))
    return s


def plot_gift(rng, a, b, place, obj, color):
    pname, sights, spots = place
    adult, ahe = rng.choice(ADULTS)
    gift = rng.choice([
        ("picked flowers", f"a bunch of {rng.choice(COLORS)} flowers", "from the garden"),
        ("drew a picture", "a picture of the whole family", "with crayons"),
        ("baked a cake", "a little cake", "with help from a friend"),
        ("made a card", f"a {rng.choice(COLORS)} card with a heart on it", "with paper and glue"),
    ])
    made, thing, how = gift
    s = [opening(rng, a, pname)]
    s.append(f"It was {adult}'s birthday, and {a.name} wanted to give {adult} a gift.")
    s.append(f"But {a.name} did not have any money.")
    s.append(f"\"What can I give?\" {a.he} asked {b.name}.")
    s.append(f"\"You can make something,\" said {b.name}.")
    s.append(f"So {a.name} {made} {how}.")
    s.append(pick(rng,
                  f"It took a long time, but {a.he} did not give up.",
                  f"{a.He} worked very hard."))
    s.append(f"At last it was ready: {thing}.")
    s.append(f"{a.name} gave it to {adult}.")
    s.append(f"{adult} smiled a big smile. \"This is the best gift of all,\" {ahe} said.")
    s.append(f"{adult} gave {a.name} a big hug, and {a.name} felt {rng.choice(FEEL_GOOD)}.")
    s.append(pick(rng,
                  f"{a.name} learned that a gift made with love is the best gift.",
                  f"That night, they all ate cake together."))
    s.append(ending(rng, a))
    return s


PLOTS = [plot_lost, plot_brave, plot_share, plot_rain, plot_help,
         plot_friend, plot_gift]


def make_story(rng):
    a = Char(rng)
    b = Char(rng, avoid=(a.name,))
    place = rng.choice(PLACES)
    obj = rng.choice(OBJECTS)
    color = rng.choice(COLORS)
    plot = rng.choice(PLOTS)
    return " ".join(plot(rng, a, b, place, obj, color))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--count", type=int, default=9000, help="number of stories")
    ap.add_argument("--out", default="-", help="output file ('-' for stdout)")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    lines = [make_story(rng) for _ in range(args.count)]
    text = "\n".join(lines) + "\n"
    if args.out == "-":
        print(text, end="")
    else:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(text)


if __name__ == "__main__":
    main()

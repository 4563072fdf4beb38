"""The shipped problems: small Python functions, each with public examples and hidden tests.

Each is a :class:`coding_env.tasks.Task` whose expected values come from its reference
solution (trusted code, run in the server, never in the sandbox); the data holds inputs only.
Splits: ``train`` and ``test`` (every fourth).
"""

# ruff: noqa: E501  (the reference solutions are data: one string per problem)
from __future__ import annotations

import dataclasses
from typing import Any

from coding_env.tasks import Case, Task, TaskSet

__all__ = ["PROBLEMS", "SPLITS", "Problem", "by_id", "sample"]

#: The former name of :class:`coding_env.tasks.Task`.
Problem = Task


def _p(pid: str, entry: str, prompt: str, reference: str, public: list[Any], hidden: list[Any]) -> Task:
    def wrap(cs: list[Any]) -> tuple[Case, ...]:
        return tuple(Case(c if isinstance(c, tuple) else (c,)) for c in cs)

    return Task(pid, prompt, entry, wrap(public), wrap(hidden), reference=reference.strip() + "\n")


_RAW = [
    _p(
        "sum_list",
        "sum_list",
        "Return the sum of a list of integers.",
        "def sum_list(xs):\n    return sum(xs)",
        [[1, 2, 3], []],
        [[5], [-1, 1], list(range(100)), [10**12, 10**12]],
    ),
    _p(
        "reverse_string",
        "reverse_string",
        "Return the string reversed.",
        "def reverse_string(s):\n    return s[::-1]",
        ["abc", ""],
        ["a", "racecar", "hello world", "ab"],
    ),
    _p(
        "is_palindrome",
        "is_palindrome",
        "Is the string a palindrome, ignoring case and non-alphanumeric characters?",
        "def is_palindrome(s):\n    t = [c.lower() for c in s if c.isalnum()]\n    return t == t[::-1]",
        ["Racecar", "abc"],
        [
            "A man, a plan, a canal: Panama",
            "",
            "ab",
            "No lemon, no melon",
            "xy z",
            "Was it a car or a cat I saw?",
            "abca",
        ],
    ),
    _p(
        "fizzbuzz",
        "fizzbuzz",
        "Return the FizzBuzz strings for 1..n ('Fizz' for multiples of 3, 'Buzz' of 5, 'FizzBuzz' of both, else the number).",
        "def fizzbuzz(n):\n    return ['FizzBuzz' if i % 15 == 0 else 'Fizz' if i % 3 == 0 else 'Buzz' if i % 5 == 0 else str(i) for i in range(1, n + 1)]",
        [5],
        [0, 1, 15, 31],
    ),
    _p(
        "factorial",
        "factorial",
        "Return n! for n >= 0.",
        "def factorial(n):\n    r = 1\n    for i in range(2, n + 1):\n        r *= i\n    return r",
        [0, 5],
        [1, 10, 20, 30],
    ),
    _p(
        "fibonacci",
        "fibonacci",
        "Return the n-th Fibonacci number (fibonacci(0) == 0, fibonacci(1) == 1).",
        "def fibonacci(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a",
        [0, 10],
        [1, 2, 5, 30, 90],
    ),
    _p(
        "count_vowels",
        "count_vowels",
        "Count the vowels (a, e, i, o, u, either case) in a string.",
        "def count_vowels(s):\n    return sum(c in 'aeiouAEIOU' for c in s)",
        ["hello", ""],
        ["AEIOU", "rhythm", "Programming in Python", "aeiou AEIOU", "bcd e"],
    ),
    _p(
        "gcd",
        "gcd",
        "Return the greatest common divisor of two non-negative integers (gcd(0, 0) == 0).",
        "import math\ndef gcd(a, b):\n    return math.gcd(a, b)",
        [(12, 18), (0, 5)],
        [(0, 0), (17, 13), (100, 75), (2**20, 2**12)],
    ),
    _p(
        "is_prime",
        "is_prime",
        "Is n a prime number?",
        "def is_prime(n):\n    if n < 2:\n        return False\n    i = 2\n    while i * i <= n:\n        if n % i == 0:\n            return False\n        i += 1\n    return True",
        [7, 1],
        [0, 2, 9, 97, 7919, 1000000007, 1000000008],
    ),
    _p(
        "primes_up_to",
        "primes_up_to",
        "Return the list of primes <= n, ascending.",
        "def primes_up_to(n):\n    return [p for p in range(2, n + 1) if all(p % d for d in range(2, int(p ** 0.5) + 1))]",
        [10],
        [1, 2, 30, 100],
    ),
    _p(
        "two_sum",
        "two_sum",
        "Return indices [i, j] with i < j and nums[i] + nums[j] == target (the first such pair in order of j, then i), or [] if none.",
        "def two_sum(nums, target):\n    seen = {}\n    for j, x in enumerate(nums):\n        if target - x in seen:\n            return [seen[target - x], j]\n        seen.setdefault(x, j)\n    return []",
        [([2, 7, 11, 15], 9)],
        [([3, 2, 4], 6), ([3, 3], 6), ([1, 2], 7), ([], 0), ([5, 1, 5], 10)],
    ),
    _p(
        "anagrams",
        "are_anagrams",
        "Are the two strings anagrams of each other (case-sensitive, all characters count)?",
        "def are_anagrams(a, b):\n    return sorted(a) == sorted(b)",
        [("listen", "silent"), ("a", "b")],
        [("", ""), ("ab", "abb"), ("Dormitory", "dirtyroom"), ("abc", "cab"), ("aab", "aba"), ("abc", "abd")],
    ),
    _p(
        "word_count",
        "word_count",
        "Return a dict mapping each lower-cased whitespace-separated word to its count.",
        "def word_count(text):\n    d = {}\n    for w in text.lower().split():\n        d[w] = d.get(w, 0) + 1\n    return d",
        ["the cat the hat"],
        ["", "A a A", "one two three two one one", "b a b", "x"],
    ),
    _p(
        "flatten",
        "flatten",
        "Flatten an arbitrarily nested list of integers into a flat list, preserving order.",
        "def flatten(xs):\n    out = []\n    for x in xs:\n        out.extend(flatten(x) if isinstance(x, list) else [x])\n    return out",
        [[[1, [2, 3]], 4]],
        [[[]], [[[[5]]]], [1, [2, [3, [4, [5]]]], 6], [], [[7, 8], [9]]],
    ),
    _p(
        "max_subarray",
        "max_subarray",
        "Return the largest sum of a non-empty contiguous subarray.",
        "def max_subarray(xs):\n    best = cur = xs[0]\n    for x in xs[1:]:\n        cur = max(x, cur + x)\n        best = max(best, cur)\n    return best",
        [[-2, 1, -3, 4, -1, 2, 1, -5, 4]],
        [[1], [-3, -1, -2], [5, 4, -1, 7, 8], [2, -1, 2, -1, 2]],
    ),
    _p(
        "binary_search",
        "binary_search",
        "Return the index of target in the sorted list, or -1.",
        "import bisect\ndef binary_search(xs, t):\n    i = bisect.bisect_left(xs, t)\n    return i if i < len(xs) and xs[i] == t else -1",
        [([1, 3, 5, 7], 5)],
        [([], 1), ([1], 1), ([1, 2, 3, 4, 5, 6], 6), ([1, 3, 5], 4), (list(range(0, 1000, 3)), 999)],
    ),
    _p(
        "roman_to_int",
        "roman_to_int",
        "Convert a Roman numeral (I..MMMCMXCIX) to an integer.",
        "def roman_to_int(s):\n    v = {'I': 1, 'V': 5, 'X': 10, 'L': 50, 'C': 100, 'D': 500, 'M': 1000}\n    t = 0\n    for i, c in enumerate(s):\n        t += -v[c] if i + 1 < len(s) and v[s[i + 1]] > v[c] else v[c]\n    return t",
        ["XIV", "III"],
        ["IX", "LVIII", "MCMXCIV", "MMMCMXCIX"],
    ),
    _p(
        "int_to_roman",
        "int_to_roman",
        "Convert an integer 1..3999 to a Roman numeral.",
        "def int_to_roman(n):\n    out = ''\n    for v, s in [(1000, 'M'), (900, 'CM'), (500, 'D'), (400, 'CD'), (100, 'C'), (90, 'XC'), (50, 'L'), (40, 'XL'), (10, 'X'), (9, 'IX'), (5, 'V'), (4, 'IV'), (1, 'I')]:\n        while n >= v:\n            out += s\n            n -= v\n    return out",
        [4, 14],
        [1, 58, 1994, 3999],
    ),
    _p(
        "balanced_brackets",
        "balanced",
        "Are the brackets ()[]{} in the string balanced? Other characters are ignored.",
        "def balanced(s):\n    st = []\n    pairs = {')': '(', ']': '[', '}': '{'}\n    for c in s:\n        if c in '([{':\n            st.append(c)\n        elif c in pairs:\n            if not st or st.pop() != pairs[c]:\n                return False\n    return not st",
        ["([]{})", "(]"],
        ["", "((", "a(b)c", "{[()()]}", "}{", "([)]", "[a{b}c]"],
    ),
    _p(
        "run_length",
        "run_length_encode",
        "Run-length encode a string: 'aaab' -> 'a3b1'.",
        "def run_length_encode(s):\n    out = []\n    i = 0\n    while i < len(s):\n        j = i\n        while j < len(s) and s[j] == s[i]:\n            j += 1\n        out.append(f'{s[i]}{j - i}')\n        i = j\n    return ''.join(out)",
        ["aaab"],
        ["", "a", "abc", "zzzzzzzzzzzz", "aabbaa"],
    ),
    _p(
        "caesar",
        "caesar",
        "Shift each ASCII letter by k positions (wrapping, keeping case); leave other characters.",
        "def caesar(s, k):\n    def sh(c):\n        if c.isascii() and c.isalpha():\n            base = ord('A') if c.isupper() else ord('a')\n            return chr((ord(c) - base + k) % 26 + base)\n        return c\n    return ''.join(sh(c) for c in s)",
        [("abc", 1)],
        [("xyz", 3), ("Hello, World!", 13), ("", 5), ("abc", -1), ("Zz", 52)],
    ),
    _p(
        "matrix_transpose",
        "transpose",
        "Transpose a rectangular matrix given as a list of rows.",
        "def transpose(m):\n    return [list(r) for r in zip(*m)]",
        [[[1, 2], [3, 4]]],
        [[[1, 2, 3]], [[1], [2]], [], [[1, 2, 3], [4, 5, 6]]],
    ),
    _p(
        "merge_intervals",
        "merge_intervals",
        "Merge overlapping closed intervals [a, b]; return them sorted by start.",
        "def merge_intervals(xs):\n    out = []\n    for a, b in sorted(xs):\n        if out and a <= out[-1][1]:\n            out[-1][1] = max(out[-1][1], b)\n        else:\n            out.append([a, b])\n    return out",
        [[[1, 3], [2, 6], [8, 10]]],
        [[], [[1, 4], [4, 5]], [[5, 6], [1, 2]], [[1, 10], [2, 3], [4, 5]]],
    ),
    _p(
        "digit_sum",
        "digit_sum",
        "Repeatedly sum the decimal digits of n >= 0 until one digit remains.",
        "def digit_sum(n):\n    while n >= 10:\n        n = sum(map(int, str(n)))\n    return n",
        [38],
        [0, 9, 10, 999999999999, 12345],
    ),
    _p(
        "second_largest",
        "second_largest",
        "Return the second largest distinct value, or None if there is none.",
        "def second_largest(xs):\n    s = sorted(set(xs))\n    return s[-2] if len(s) > 1 else None",
        [[1, 3, 2]],
        [[], [5], [5, 5], [1, 2, 2, 3, 3], [-1, -2], [7, 7, 9]],
    ),
    _p(
        "unique_sorted",
        "unique_sorted",
        "Return the distinct values, in order of first appearance.",
        "def unique_sorted(xs):\n    seen = set()\n    return [x for x in xs if not (x in seen or seen.add(x))]",
        [[3, 1, 3, 2, 1]],
        [[], [1, 1, 1], [5, 4, 3, 2, 1], ["b", "a", "b"]],
    ),
    _p(
        "longest_common_prefix",
        "longest_common_prefix",
        "Return the longest common prefix of a list of strings ('' for an empty list).",
        "import os\ndef longest_common_prefix(xs):\n    return os.path.commonprefix(xs) if xs else ''",
        [["flower", "flow", "flight"]],
        [[], ["a"], ["dog", "racecar"], ["interview", "internet", "interval"], ["ab", "abc"]],
    ),
    _p(
        "pascal_row",
        "pascal_row",
        "Return row n of Pascal's triangle (row 0 is [1]).",
        "def pascal_row(n):\n    row = [1]\n    for _ in range(n):\n        row = [a + b for a, b in zip([0] + row, row + [0])]\n    return row",
        [3],
        [0, 1, 5, 20],
    ),
    _p(
        "count_islands",
        "count_islands",
        "Count 4-connected groups of 1s in a grid of 0/1 rows.",
        "def count_islands(g):\n    seen = set()\n    n = 0\n    for i, row in enumerate(g):\n        for j, v in enumerate(row):\n            if v and (i, j) not in seen:\n                n += 1\n                st = [(i, j)]\n                while st:\n                    a, b = st.pop()\n                    if (a, b) in seen or not (0 <= a < len(g) and 0 <= b < len(g[a])) or not g[a][b]:\n                        continue\n                    seen.add((a, b))\n                    st += [(a + 1, b), (a - 1, b), (a, b + 1), (a, b - 1)]\n    return n",
        [[[1, 1, 0], [0, 0, 1]]],
        [[], [[0]], [[1, 0, 1], [0, 1, 0], [1, 0, 1]], [[1, 1], [1, 1]], [[1, 0, 0, 1], [1, 0, 1, 1], [0, 0, 0, 0]]],
    ),
    _p(
        "edit_distance",
        "edit_distance",
        "Return the Levenshtein distance between two strings.",
        "def edit_distance(a, b):\n    prev = list(range(len(b) + 1))\n    for i, x in enumerate(a, 1):\n        cur = [i]\n        for j, y in enumerate(b, 1):\n            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (x != y)))\n        prev = cur\n    return prev[-1]",
        [("kitten", "sitting")],
        [("", ""), ("a", ""), ("flaw", "lawn"), ("intention", "execution")],
    ),
    _p(
        "mean_median",
        "mean_median",
        "Return [mean, median] of a non-empty list of numbers, as floats.",
        "def mean_median(xs):\n    s = sorted(xs)\n    n = len(s)\n    med = s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2\n    return [sum(s) / n, float(med)]",
        [[1, 2, 3, 4]],
        [[5], [3, 1, 2], [1.5, 2.5], [10, -10, 0, 7, 7], [4, 8]],
    ),
    _p(
        "valid_ipv4",
        "valid_ipv4",
        "Is the string a dotted-decimal IPv4 address (four 0..255 parts, no leading zeros)?",
        "def valid_ipv4(s):\n    parts = s.split('.')\n    return len(parts) == 4 and all(p.isdigit() and p.isascii() and str(int(p)) == p and int(p) <= 255 for p in parts)",
        ["192.168.0.1", "256.1.1.1"],
        ["0.0.0.0", "1.2.3", "01.2.3.4", "1.2.3.4.5", "a.b.c.d", "255.255.255.255", "10.0.0.255", "1.2.3.-4"],
    ),
    _p(
        "rotate_list",
        "rotate",
        "Rotate a list right by k steps (k >= 0).",
        "def rotate(xs, k):\n    if not xs:\n        return []\n    k %= len(xs)\n    return xs[-k:] + xs[:-k] if k else list(xs)",
        [([1, 2, 3, 4, 5], 2)],
        [([], 3), ([1], 10), ([1, 2, 3], 3), ([1, 2, 3], 4)],
    ),
    _p(
        "title_case",
        "title_case",
        "Capitalise the first letter of each space-separated word and lower-case the rest.",
        "def title_case(s):\n    return ' '.join(w[:1].upper() + w[1:].lower() for w in s.split(' '))",
        ["hello WORLD"],
        ["", "a", "python is FUN", "x  y"],
    ),
    _p(
        "coin_change",
        "coin_change",
        "Fewest coins summing to amount (unlimited coins of each value), or -1.",
        "def coin_change(coins, amount):\n    best = [0] + [None] * amount\n    for a in range(1, amount + 1):\n        c = [best[a - x] for x in coins if x <= a and best[a - x] is not None]\n        best[a] = min(c) + 1 if c else None\n    return -1 if best[amount] is None else best[amount]",
        [([1, 2, 5], 11)],
        [([2], 3), ([1], 0), ([3, 7], 20), ([186, 419, 83, 408], 6249)],
    ),
]

PROBLEMS = TaskSet(dataclasses.replace(p, split="test" if i % 4 == 3 else "train") for i, p in enumerate(_RAW))
SPLITS = PROBLEMS.splits


def by_id(pid: str) -> Task:
    """The shipped problem ``pid`` (KeyError naming the known ones otherwise)."""
    return PROBLEMS.by_id(pid)


def sample(seed: int | None, split: str | None = None) -> Task:
    """The problem for ``seed`` (the same on every machine) among ``split`` (all by default)."""
    return PROBLEMS.sample(seed, split)

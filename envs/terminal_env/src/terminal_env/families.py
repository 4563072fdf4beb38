"""The multi-step task families: logs and data sets to summarise with pipelines, files to
move, rename, compress and fix the permissions of, archives to build and unpack, git
repositories to query and change, a service script with a pid file, jobs to run under a time
limit, broken scripts and configurations to repair, a SQLite database to report on.

Each generator draws everything from its ``rng`` (names, counts, sizes, values, which files are
broken and how) and computes the checks' expected values from what it drew, as the families of
:mod:`terminal_env.tasks` do; the contract is the same (every check fails on the untouched
workspace, the ``solution`` passes them all, ``answer`` is what a solved workspace holds that
the starting one does not). :data:`FAMILIES` lists them with their tier and split; :data:`TASKS` is every family, the
first ones of :mod:`terminal_env.tasks` included (this module is above that one).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import random
import re
import sqlite3
import tarfile
from collections import Counter

from terminal_env.gitrepo import git_repo
from terminal_env.tasks import FIRST_FAMILIES, Check, Task, TaskFamily, TaskSet, _cents, _lines, _tar_gz, _word, _words

__all__ = ["FAMILIES", "TASKS"]


def _distinct_ints(rng: random.Random, k: int, lo: int, hi: int) -> list[int]:
    return rng.sample(range(lo, hi + 1), k)


# -- logs and data sets ---------------------------------------------------------------------------

_PATHS = ("/", "/login", "/logout", "/api/items", "/api/users", "/static/app.js", "/search", "/cart", "/health")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def _ip(rng: random.Random) -> str:
    return f"10.{rng.randint(0, 255)}.{rng.randint(0, 255)}.{rng.randint(1, 254)}"


def _access_line(rng: random.Random, ip: str, path: str, status: int, size: int) -> str:
    month = rng.choice(_MONTHS)
    stamp = f"{rng.randint(1, 28):02d}/{month}/2026:{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:00 +0000"
    method = rng.choice(["GET", "GET", "POST"])
    return f'{ip} - - [{stamp}] "{method} {path} HTTP/1.1" {status} {size}'


def _status_report(rng: random.Random) -> Task:
    codes = sorted(rng.sample([200, 201, 204, 301, 302, 304, 400, 401, 403, 404, 500, 502, 503], rng.randint(4, 7)))
    counts = {c: rng.randint(1, 60) for c in codes}
    ips = [_ip(rng) for _ in range(rng.randint(4, 9))]
    lines = [
        _access_line(rng, rng.choice(ips), rng.choice(_PATHS), c, rng.randint(100, 9000))
        for c, n in counts.items()
        for _ in range(n)
    ]
    rng.shuffle(lines)
    expected = _lines(f"{c} {counts[c]}" for c in codes)
    return Task(
        "status_report",
        "access.log is a web server's access log (common log format: the status code is the field after the "
        "quoted request). Write status_counts.txt: one line `STATUS COUNT` per status code that occurs, "
        "in ascending order of the status code.",
        {"access.log": _lines(lines)},
        (Check("status_counts.txt", "result = read('status_counts.txt')", expected),),
        "awk '{print $9}' access.log | sort | uniq -c | awk '{print $2, $1}' | sort -n > status_counts.txt",
        answer={"status_counts.txt": expected},
    )


def _top_client(rng: random.Random) -> Task:
    ips = list(dict.fromkeys(_ip(rng) for _ in range(rng.randint(5, 10))))
    fails = _distinct_ints(rng, len(ips), 0, 40)  # distinct: one IP has the most
    lines = []
    for ip, n in zip(ips, fails, strict=True):
        lines += [_access_line(rng, ip, rng.choice(_PATHS), rng.choice([500, 502, 503]), 0) for _ in range(n)]
        lines += [_access_line(rng, ip, rng.choice(_PATHS), rng.choice([200, 304, 404]), 512) for _ in range(50 - n)]
    rng.shuffle(lines)
    worst = max(range(len(ips)), key=lambda i: fails[i])
    expected = f"{ips[worst]} {fails[worst]}"
    return Task(
        "top_client",
        "access.log is a web server's access log (common log format). Find the client address with the most "
        "server errors (status 500 to 599) and write `ADDRESS COUNT` (one line) to worst_client.txt.",
        {"access.log": _lines(lines)},
        (Check("worst_client.txt", "result = read('worst_client.txt').strip()", expected),),
        "awk '$9 >= 500 && $9 < 600 {print $1}' access.log | sort | uniq -c | sort -rn | head -1 "
        "| awk '{print $2, $1}' > worst_client.txt",
        answer={"worst_client.txt": expected + "\n"},
    )


def _bytes_per_path(rng: random.Random) -> Task:
    paths = rng.sample(_PATHS, rng.randint(5, 8))
    totals = _distinct_ints(rng, len(paths), 1000, 90000)
    lines = []
    for path, total in zip(paths, totals, strict=True):
        k = rng.randint(1, 6)
        cuts = sorted(rng.sample(range(1, total), k - 1)) if k > 1 else []
        for size in (b - a for a, b in zip([0, *cuts], [*cuts, total], strict=True)):
            lines.append(_access_line(rng, _ip(rng), path, 200, size))
        for _ in range(rng.randint(1, 4)):  # not 200: not counted
            lines.append(_access_line(rng, _ip(rng), path, rng.choice([304, 404, 500]), rng.randint(100, 99999)))
    rng.shuffle(lines)
    top = sorted(zip(paths, totals, strict=True), key=lambda r: -r[1])[:3]
    expected = _lines(f"{p} {t}" for p, t in top)
    return Task(
        "bytes_per_path",
        "access.log is a web server's access log (common log format: the request's path is the second word of "
        "the quoted request, the response size the last field). Over the requests answered with status 200 only, "
        "sum the response sizes per path and write the three paths with the largest sums to top_paths.txt, "
        "one `PATH BYTES` line each, largest first.",
        {"access.log": _lines(lines)},
        (Check("top_paths.txt", "result = read('top_paths.txt')", expected),),
        "awk '$9 == 200 {s[$7] += $10} END {for (p in s) print p, s[p]}' access.log | sort -k2 -nr | head -3 "
        "> top_paths.txt",
        answer={"top_paths.txt": expected},
    )


def _join_totals(rng: random.Random) -> Task:
    names = _words(rng, rng.randint(4, 8))
    ids = _distinct_ints(rng, len(names), 100, 999)
    orders, totals = [], dict.fromkeys(names, 0)
    for n in range(rng.randint(8, 25)):
        i = rng.randrange(len(names) - 1)  # the last user has no order
        cents = rng.randint(100, 99999)
        orders.append(f"{5000 + n},{ids[i]},{_cents(cents)}")
        totals[names[i]] += cents
    users = [f"{i},{n}" for i, n in zip(ids, names, strict=True)]
    rng.shuffle(users)
    expected = _lines(f"{n} {_cents(c)}" for n, c in sorted(totals.items()) if c)
    return Task(
        "join_totals",
        "users.csv (id,name) and orders.csv (order_id,user_id,amount) have a header line each. Write totals.txt: "
        "for every user with at least one order, `NAME TOTAL` with the sum of their orders' amounts (two "
        "decimals), sorted by name.",
        {"users.csv": "id,name\n" + _lines(users), "orders.csv": "order_id,user_id,amount\n" + _lines(orders)},
        (Check("totals.txt", "result = read('totals.txt')", expected),),
        "awk -F, 'NR == FNR {if (FNR > 1) n[$1] = $2; next} FNR > 1 {s[n[$2]] += $3 * 100} "
        'END {for (k in s) printf "%s %.2f\\n", k, s[k] / 100}\' users.csv orders.csv | LC_ALL=C sort > totals.txt',
        answer={"totals.txt": expected},
    )


def _jsonl_filter(rng: random.Random) -> Task:
    users = _words(rng, rng.randint(6, 12))
    actions = _words(rng, 3, 1)
    action, limit = actions[0], rng.randint(200, 800)
    slow: set[str] = set()
    events = []
    for _ in range(rng.randint(30, 60)):
        user, act, ms = rng.choice(users), rng.choice(actions), rng.randint(1, 1000)
        events.append(json.dumps({"user": user, "action": act, "ms": ms, "ok": rng.random() < 0.8}))
        if act == action and ms > limit:
            slow.add(user)
    if not slow:
        events.append(json.dumps({"user": users[0], "action": action, "ms": limit + 1, "ok": True}))
        slow.add(users[0])
    expected = _lines(sorted(slow))
    return Task(
        "jsonl_filter",
        f"events.jsonl has one JSON object per line (user, action, ms, ok). Write slow_users.txt: the users with "
        f"at least one `{action}` event that took more than {limit} ms, each once, sorted.",
        {"events.jsonl": _lines(events)},
        (Check("slow_users.txt", "result = read('slow_users.txt')", expected),),
        "python3 -c 'import json, sys\n"
        f'rows = [json.loads(l) for l in open("events.jsonl")]\n'
        f'print("\\n".join(sorted({{r["user"] for r in rows if r["action"] == "{action}" '
        f'and r["ms"] > {limit}}})))\' > slow_users.txt',
        answer={"slow_users.txt": expected},
    )


def _region_totals(rng: random.Random) -> Task:
    regions = [w.upper() for w in _words(rng, rng.randint(3, 6))]
    totals = _distinct_ints(rng, len(regions), 50, 5000)
    rows = []
    for region, total in zip(regions, totals, strict=True):
        k = rng.randint(1, 5)
        cuts = sorted(rng.sample(range(1, total), k - 1)) if k > 1 else []
        rows += [f"{region}\t{b - a}" for a, b in zip([0, *cuts], [*cuts, total], strict=True)]
    rng.shuffle(rows)
    expected = _lines(f"{r} {t}" for r, t in sorted(zip(regions, totals, strict=True), key=lambda x: -x[1]))
    return Task(
        "region_totals",
        "sales.tsv has tab-separated region and amount columns (no header). Write region_totals.txt: one "
        "`REGION TOTAL` line per region, largest total first.",
        {"sales.tsv": _lines(rows)},
        (Check("region_totals.txt", "result = read('region_totals.txt')", expected),),
        "awk -F'\\t' '{s[$1] += $2} END {for (r in s) print r, s[r]}' sales.tsv | sort -k2 -nr > region_totals.txt",
        answer={"region_totals.txt": expected},
    )


def _first_seen(rng: random.Random) -> Task:
    names = _words(rng, rng.randint(5, 10))
    visits = list(names)
    visits += [rng.choice(names) for _ in range(rng.randint(10, 30))]
    rng.shuffle(visits)
    order = list(dict.fromkeys(visits))
    return Task(
        "first_seen",
        "visits.txt lists one visitor per line, with repeats. Write order.txt: each visitor once, in the order "
        "of their first visit.",
        {"visits.txt": _lines(visits)},
        (Check("order.txt", "result = read('order.txt')", _lines(order)),),
        "awk '!seen[$0]++' visits.txt > order.txt",
        answer={"order.txt": _lines(order)},
    )


def _env_merge(rng: random.Random) -> Task:
    keys = [f"{_word(rng).upper()}_{rng.choice(['HOST', 'PORT', 'USER', 'MODE', 'PATH', 'LEVEL'])}" for _ in range(8)]
    keys = list(dict.fromkeys(keys))
    defaults = {k: f"{_word(rng)}{rng.randint(0, 99)}" for k in keys}
    overridden = rng.sample(keys, rng.randint(2, max(2, len(keys) // 2)))
    local = {k: f"{_word(rng, 3)}={rng.randint(1, 9)}" if rng.random() < 0.3 else _word(rng, 3) for k in overridden}
    extra = f"{_word(rng).upper()}_EXTRA"
    local[extra] = _word(rng)
    merged = {**defaults, **local}

    def env_file(values: dict[str, str]) -> str:
        lines = [f"# {_word(rng, 3)} settings", ""]
        for k, v in values.items():
            lines.append(f"{k}={v}")
            if rng.random() < 0.3:
                lines.append(f"# {k} was {_word(rng)}")
        return _lines(lines)

    expected = _lines(f"{k}={merged[k]}" for k in sorted(merged))
    return Task(
        "env_merge",
        "defaults.env and local.env hold KEY=VALUE lines, comments (#) and blank lines; a value may itself "
        "contain '='. Write merged.env: every key of either file once as KEY=VALUE, local.env's value where both "
        "have the key, no comments or blank lines, sorted by key in byte order (as `LC_ALL=C sort`).",
        {"defaults.env": env_file(defaults), "local.env": env_file(local)},
        (Check("merged.env", "result = read('merged.env')", expected),),
        "cat defaults.env local.env | grep -v '^#' | grep '=' | "
        'awk \'{i = index($0, "="); v[substr($0, 1, i - 1)] = substr($0, i + 1)} END {for (k in v) print k "=" v[k]}\' '
        "| LC_ALL=C sort > merged.env",
        answer={"merged.env": expected},
    )


def _histogram(rng: random.Random) -> Task:
    width = rng.choice([50, 100, 250])
    values = [rng.randint(0, 999) for _ in range(rng.randint(20, 80))]
    buckets = Counter(v // width for v in values)
    expected = _lines(f"{b * width}-{b * width + width - 1} {buckets[b]}" for b in sorted(buckets))
    return Task(
        "histogram",
        f"latencies.txt holds one latency in ms per line. Write histogram.txt: for each bucket of {width} ms "
        f"(0-{width - 1}, {width}-{2 * width - 1}, ...) that holds at least one latency, a line `LOW-HIGH COUNT`, "
        "in ascending order.",
        {"latencies.txt": _lines(str(v) for v in values)},
        (Check("histogram.txt", "result = read('histogram.txt')", expected),),
        f'awk \'{{b = int($1 / {width}); c[b]++}} END {{for (b in c) print b * {width} "-" b * {width} + {width - 1}, '
        "c[b]}' latencies.txt | sort -n > histogram.txt",
        answer={"histogram.txt": expected},
    )


def _common_lines(rng: random.Random) -> Task:
    pool = _words(rng, rng.randint(12, 24))
    a = rng.sample(pool, rng.randint(6, len(pool) - 3))
    b = rng.sample(pool, rng.randint(6, len(pool) - 3))
    both = sorted(set(a) & set(b))
    if not both:
        b.append(a[0])
        both = [a[0]]
    return Task(
        "common_lines",
        "team_a.txt and team_b.txt list one member per line, in no order. Write both.txt: the members on both "
        "lists, sorted, one per line.",
        {"team_a.txt": _lines(a), "team_b.txt": _lines(b)},
        (Check("both.txt", "result = read('both.txt')", _lines(both)),),
        "comm -12 <(LC_ALL=C sort team_a.txt) <(LC_ALL=C sort team_b.txt) > both.txt",
        answer={"both.txt": _lines(both)},
    )


def _date_format(rng: random.Random) -> Task:
    before, after = [], []
    for _ in range(rng.randint(6, 15)):
        d, m, y = rng.randint(1, 28), rng.randint(1, 12), rng.randint(1990, 2030)
        text = f"{_word(rng)} {rng.randint(1, 12)}/{rng.randint(1, 9)} {_word(rng, 3)}"
        before.append(f"{d:02d}/{m:02d}/{y} {text}")
        after.append(f"{y}-{m:02d}-{d:02d} {text}")
    return Task(
        "date_format",
        "Each line of events.txt starts with a date as DD/MM/YYYY. Rewrite the file in place so that each line "
        "starts with the date as YYYY-MM-DD instead; the rest of every line (other numbers with slashes "
        "included) stays as it is.",
        {"events.txt": _lines(before)},
        (Check("events.txt", "result = read('events.txt')", _lines(after)),),
        "sed -E -i 's#^([0-9]{2})/([0-9]{2})/([0-9]{4})#\\3-\\2-\\1#' events.txt",
        answer={"events.txt": _lines(after)},
    )


def _word_counts(rng: random.Random) -> Task:
    names = _words(rng, rng.randint(3, 7))
    counts = _distinct_ints(rng, len(names), 5, 120)
    files = {}
    for name, n in zip(names, counts, strict=True):
        words = [_word(rng, rng.randint(1, 3)) for _ in range(n)]
        out, line = [], []
        for w in words:
            line.append(w)
            if len(line) >= rng.randint(3, 12):
                out.append(" ".join(line))
                line = []
        out.append(" ".join(line))
        files[f"docs/{name}.txt"] = _lines(out)
    files["docs/README.md"] = "not a .txt file: it does not count\n"
    expected = _lines(f"{n} {name}.txt" for name, n in sorted(zip(names, counts, strict=True), key=lambda r: -r[1]))
    return Task(
        "word_counts",
        "Write counts.txt: for each .txt file in docs/, a line `WORDS FILENAME` (its number of words as wc -w "
        "counts them, its name without the directory), most words first.",
        files,
        (Check("counts.txt", "result = read('counts.txt')", expected),),
        'for f in docs/*.txt; do echo "$(wc -w < "$f") $(basename "$f")"; done | sort -rn > counts.txt',
        answer={"counts.txt": expected},
    )


def _html_links(rng: random.Random) -> Task:
    hosts = [f"{w}.example" for w in _words(rng, rng.randint(3, 6))]
    links: set[str] = set()
    files = {}
    for page in _words(rng, rng.randint(2, 4)):
        body = ["<html><body>"]
        for _ in range(rng.randint(3, 9)):
            if rng.random() < 0.7:
                url = f"https://{rng.choice(hosts)}/{_word(rng)}"
                links.add(url)
            else:
                url = rng.choice([f"/{_word(rng)}.html", f"http://{rng.choice(hosts)}/old", "#top"])
            body.append(f'<p>{_word(rng, 3)} <a class="x" href="{url}">{_word(rng)}</a></p>')
        body.append("</body></html>")
        files[f"pages/{page}.html"] = _lines(body)
    if not links:
        url = f"https://{hosts[0]}/index"
        links.add(url)
        files[f"pages/{_word(rng)}x.html"] = f'<a href="{url}">home</a>\n'
    expected = _lines(sorted(links))
    return Task(
        "html_links",
        'Write links.txt: every distinct link target (the href="..." values) of the pages/*.html files that '
        "starts with https://, sorted in byte order, one per line.",
        files,
        (Check("links.txt", "result = read('links.txt')", expected),),
        'grep -oh \'href="https://[^"]*"\' pages/*.html | sed \'s/^href="//; s/"$//\' | LC_ALL=C sort -u > links.txt',
        answer={"links.txt": expected},
    )


def _group_members(rng: random.Random) -> Task:
    groups = _words(rng, 4)
    gids = dict(zip(groups, _distinct_ints(rng, 4, 1000, 1999), strict=True))
    target = groups[0]
    users = _words(rng, rng.randint(6, 12), 3)
    passwd, members = [], {g: [] for g in groups}
    wanted = set()
    for uid, user in enumerate(users, start=2000):
        primary = rng.choice(groups)
        shell = rng.choice(["/bin/bash", "/bin/bash", "/bin/sh", "/usr/sbin/nologin"])
        passwd.append(f"{user}:x:{uid}:{gids[primary]}:{user.capitalize()}:/home/{user}:{shell}")
        extra = rng.choice(groups)
        if extra != primary:
            members[extra].append(user)
        if shell == "/bin/bash" and target in (primary, extra):
            wanted.add(user)
    if not wanted:  # one at least
        passwd.append(f"root{users[0]}:x:3000:{gids[target]}:R:/root:/bin/bash")
        wanted.add(f"root{users[0]}")
    group = [f"{g}:x:{gids[g]}:{','.join(members[g])}" for g in groups]
    expected = _lines(sorted(wanted))
    return Task(
        "group_members",
        f"passwd and group are in the formats of /etc/passwd and /etc/group. Write members.txt: the users whose "
        f"login shell is /bin/bash and who belong to the group {target} (as their primary group, by its id, or "
        "listed as a member in group), sorted, one per line.",
        {"passwd": _lines(passwd), "group": _lines(group)},
        (Check("members.txt", "result = read('members.txt')", expected),),
        f"gid=$(awk -F: '$1 == \"{target}\" {{print $3}}' group) && "
        f"extra=$(awk -F: '$1 == \"{target}\" {{print $4}}' group) && "
        'awk -F: -v gid="$gid" -v extra=",$extra," \'$7 == "/bin/bash" && ($4 == gid || index(extra, "," $1 ","))'
        " {print $1}' passwd | LC_ALL=C sort > members.txt",
        answer={"members.txt": expected},
    )


def _disk_usage(rng: random.Random) -> Task:
    tops = _words(rng, rng.randint(3, 5))
    totals = _distinct_ints(rng, len(tops), 200, 20000)
    files = {}
    for top, total in zip(tops, totals, strict=True):
        k = rng.randint(1, 5)
        cuts = sorted(rng.sample(range(1, total), k - 1)) if k > 1 else []
        subs = ["", *(f"{w}/" for w in _words(rng, 2))]
        for size, name in zip(
            (b - a for a, b in zip([0, *cuts], [*cuts, total], strict=True)), _words(rng, k), strict=True
        ):
            files[f"data/{top}/{rng.choice(subs)}{name}.dat"] = "x" * size
    expected = _lines(f"{t} {d}" for d, t in sorted(zip(tops, totals, strict=True), key=lambda r: -r[1]))
    return Task(
        "disk_usage",
        "Write usage.txt: for each directory directly in data/, a line `BYTES NAME` with the total size in bytes "
        "of the files anywhere under it (their lengths, not disk blocks), largest first.",
        files,
        (Check("usage.txt", "result = read('usage.txt')", expected),),
        "for d in data/*/; do echo \"$(find \"$d\" -type f -printf '%s\\n' | awk '{s += $1} END {print s + 0}') "
        '$(basename "$d")"; done | sort -rn > usage.txt',
        answer={"usage.txt": expected},
    )


def _block_extract(rng: random.Random) -> Task:
    names = _words(rng, rng.randint(3, 5))
    target = rng.choice(names)
    lines, block = [f"# config of {_word(rng, 3)}"], []
    for name in names:
        body = [f"{_word(rng)} = {rng.randint(0, 999)}" for _ in range(rng.randint(2, 6))]
        lines += [f"# >>> {name}", *body, f"# <<< {name}", ""]
        if name == target:
            block = body
    return Task(
        "block_extract",
        f"settings.conf has blocks that start with a line `# >>> NAME` and end with `# <<< NAME`. Write the lines "
        f"inside the block named {target} (the marker lines excluded) to block.txt.",
        {"settings.conf": _lines(lines)},
        (Check("block.txt", "result = read('block.txt')", _lines(block)),),
        f"sed -n '/^# >>> {target}$/,/^# <<< {target}$/p' settings.conf | sed '1d;$d' > block.txt",
        answer={"block.txt": _lines(block)},
    )


# -- the file system -------------------------------------------------------------------------------


def _listing_check(root: str, expected: list[str]) -> Check:
    return Check(
        f"the files under {root}/",
        f"result = sh('find {root} -type f | LC_ALL=C sort')",
        [0, _lines(sorted(expected))],
    )


def _rename_ext(rng: random.Random) -> Task:
    dirs = ["photos", *(f"photos/{w}" for w in _words(rng, 2))]
    files: dict[str, str] = {}
    moved: dict[str, str] = {}  # new path -> contents
    names = _words(rng, rng.randint(6, 12))
    for i, name in enumerate(names):
        ext = rng.choice(["jpeg", "JPEG", "jpeg", "png", "jpg", "txt"]) if i else rng.choice(["jpeg", "JPEG"])
        path = f"{rng.choice(dirs)}/{name}.{ext}"
        files[path] = f"{name}\n"
        if ext.lower() == "jpeg":
            moved[path.rsplit(".", 1)[0] + ".jpg"] = files[path]
    after = [p for p in files if not p.lower().endswith(".jpeg")] + list(moved)
    renamed = len(moved)
    return Task(
        "rename_ext",
        "Rename every file under photos/ (at any depth) whose extension is .jpeg, in any case, to the same name "
        "with the extension .jpg, then write the number of files renamed to renamed.txt.",
        files,
        (
            _listing_check("photos", after),
            Check("renamed.txt", "result = read('renamed.txt').strip()", str(renamed)),
        ),
        "find photos -type f -iname '*.jpeg' > /tmp/list && wc -l < /tmp/list > renamed.txt && "
        'while read -r f; do mv "$f" "${f%.*}.jpg"; done < /tmp/list',
        answer={"renamed.txt": f"{renamed}\n", **moved},
    )


def _sort_into_dirs(rng: random.Random) -> Task:
    files: dict[str, str] = {}
    moved: dict[str, str] = {}
    for name in _words(rng, rng.randint(6, 12)):
        ext = rng.choice(["pdf", "PDF", "txt", "csv", "png", ""])
        path = f"inbox/{name}.{ext}" if ext else f"inbox/{name}"
        files[path] = f"{name}\n"
        moved[f"inbox/{ext.lower() or 'other'}/{path[6:]}"] = files[path]
    after = list(moved)
    return Task(
        "sort_into_dirs",
        "Move each file in inbox/ into a subdirectory of inbox/ named after its extension in lower case "
        "(inbox/a.PDF goes to inbox/pdf/a.PDF); files without an extension go to inbox/other/.",
        files,
        (_listing_check("inbox", after),),
        'cd inbox && for f in *; do [ -f "$f" ] || continue; case "$f" in *.*) d=$(echo "${f##*.}" '
        '| tr A-Z a-z);; *) d=other;; esac; mkdir -p "$d" && mv "$f" "$d/"; done',
        answer=moved,
    )


def _duplicate_files(rng: random.Random) -> Task:
    dirs = ["data", *(f"data/{w}" for w in _words(rng, 3))]
    contents = [f"{_word(rng, 4)} {rng.randint(0, 10**6)}\n" for _ in range(rng.randint(4, 8))]
    files = {}
    for name in _words(rng, rng.randint(8, 14)):
        files[f"{rng.choice(dirs)}/{name}.txt"] = rng.choice(contents)
    seen = Counter(files.values())
    if all(n == 1 for n in seen.values()):
        files[f"data/{_word(rng)}x.txt"] = next(iter(files.values()))
        seen = Counter(files.values())
    dupes = sorted(p for p, text in files.items() if seen[text] > 1)
    return Task(
        "duplicate_files",
        "Some files under data/ have exactly the same contents as others. Write dupes.txt: the path (like "
        "data/x/y.txt) of every file whose contents equal another file's, sorted in byte order, one per line.",
        files,
        (Check("dupes.txt", "result = read('dupes.txt')", _lines(dupes)),),
        "find data -type f -exec md5sum {} + | awk '{n[$1]++; f[$2] = $1} END {for (p in f) if (n[f[p]] > 1) print p}' "
        "| LC_ALL=C sort > dupes.txt",
        answer={"dupes.txt": _lines(dupes)},
    )


def _fix_permissions(rng: random.Random) -> Task:
    files: dict[str, str] = {}
    modes: dict[str, int] = {}
    want: dict[str, int] = {}
    for name in _words(rng, rng.randint(2, 4)):
        files[f"site/scripts/{name}.sh"] = f"#!/bin/sh\necho {name}\n"
        want[f"site/scripts/{name}.sh"] = 0o755
    for name in _words(rng, rng.randint(2, 4)):
        files[f"site/public/{name}.html"] = f"<p>{name}</p>\n"
        want[f"site/public/{name}.html"] = 0o644
    for name in _words(rng, rng.randint(1, 3)):
        files[f"site/secrets/{name}.key"] = f"{rng.getrandbits(64):016x}\n"
        want[f"site/secrets/{name}.key"] = 0o600
    for path in files:
        modes[path] = rng.choice([0o644, 0o666, 0o777, 0o600, 0o640, 0o755])
    first = next(iter(files))
    if modes[first] == want[first]:
        modes[first] = 0o666 if want[first] != 0o666 else 0o644
    return Task(
        "fix_permissions",
        "Fix the permissions under site/: the .sh files in site/scripts/ rwxr-xr-x (755), the .key files in "
        "site/secrets/ readable and writable by their owner only (600), every other file rw-r--r-- (644).",
        files,
        (
            Check(
                "the files' modes",
                "result = {p: mode(p) for p in sh('find site -type f')[1].split()}",
                dict(sorted(want.items())),
            ),
        ),
        "find site -type f -exec chmod 644 {} + && chmod 755 site/scripts/*.sh && chmod 600 site/secrets/*.key",
        modes=modes,
        answer=files,
        answer_modes=want,
    )


def _manifest_tree(rng: random.Random) -> Task:
    rows = []
    dirs = [_word(rng), f"{_word(rng)}/{_word(rng)}"]
    for name in _words(rng, rng.randint(4, 8)):
        m = rng.choice([0o644, 0o755, 0o600, 0o640, 0o700])
        rows.append((m, f"{rng.choice(dirs)}/{name}{rng.choice(['', '.sh', '.conf'])}"))
    manifest = _lines(f"{m:04o} {p}" for m, p in rows)
    return Task(
        "manifest_tree",
        "manifest.txt lists files to create, one per line as `MODE PATH` (an octal mode, a path relative to the "
        "workspace). Create each one as an empty file, with its directories, and give it exactly that mode.",
        {"manifest.txt": manifest},
        (
            Check(
                "the files and their modes",
                f"result = {{p: [mode(p), read(p)] if exists(p) else None for p in {[p for _, p in rows]!r}}}",
                {p: [m, ""] for m, p in rows},
            ),
        ),
        'while read -r m p; do mkdir -p "$(dirname "$p")" && : > "$p" && chmod "$m" "$p"; done < manifest.txt',
        answer={p: "" for _, p in rows},
        answer_modes={p: m for m, p in rows},
    )


def _compress_logs(rng: random.Random) -> Task:
    limit = rng.choice([1000, 2000, 4000])
    files: dict[str, str] = {}
    big: list[str] = []
    for name in _words(rng, rng.randint(4, 8)):
        size = rng.randint(limit // 4, limit * 3)
        if size == limit:
            size += 1
        line = f"{_word(rng, 3)} {rng.randint(0, 9999)}\n"
        text = (line * (size // len(line) + 1))[:size]
        path = f"var/log/{name}.log"
        files[path] = text
        if size > limit:
            big.append(path)
    if not big:
        path = f"var/log/{_word(rng)}x.log"
        files[path] = "y" * (limit + 10)
        big.append(path)
    files["var/log/README"] = "rotate the big ones\n"
    after = [p + ".gz" if p in big else p for p in files]
    digest = {p + ".gz": hashlib.sha256(files[p].encode()).hexdigest() for p in big}
    return Task(
        "compress_logs",
        f"Compress with gzip every .log file in var/log/ larger than {limit} bytes (each replaced by its .log.gz, "
        "as gzip does), leave the others as they are, and write the paths of the compressed logs as they were "
        "before (like var/log/a.log) to compressed.txt, sorted, one per line.",
        files,
        (
            _listing_check("var", after),
            Check(
                "each .gz holds its log",
                f"result = {{p: sh('gzip -dc ' + p + ' | sha256sum')[1].split()[0] for p in {sorted(digest)!r}}}",
                digest,
            ),
            Check("compressed.txt", "result = read('compressed.txt')", _lines(sorted(big))),
        ),
        f"find var/log -name '*.log' -size +{limit}c | LC_ALL=C sort > compressed.txt && xargs gzip < compressed.txt",
        answer={
            "compressed.txt": _lines(sorted(big)),
            **{p + ".gz": gzip.compress(files[p].encode(), mtime=0) for p in big},
        },
    )


def _rename_identifier(rng: random.Random) -> Task:
    old, new = _word(rng, 3), _word(rng, 3)
    while new == old:
        new = _word(rng, 3)
    files, after = {}, {}
    for mod in _words(rng, rng.randint(2, 4)):
        lines = [f"def {old}(x):", "    return x + 1", ""]
        for _ in range(rng.randint(2, 5)):
            kind = rng.choice(["call", "longer", "attr", "string"])
            if kind == "call":
                lines.append(f"y = {old}({rng.randint(0, 9)})")
            elif kind == "longer":
                lines.append(f"{old}_count = {rng.randint(0, 9)}  # not the function: {old}_count stays")
            elif kind == "attr":
                lines.append(f"z = my{old}  # another name")
            else:
                lines.append(f"print({old}(2), '{old}')")
        text = _lines(lines)
        files[f"src/{mod}.py"] = text
        after[f"src/{mod}.py"] = _swap_word(text, old, new)
    files["src/NOTES.txt"] = f"{old} is used in the .py files\n"
    return Task(
        "rename_identifier",
        f"Rename the identifier {old} to {new} in every .py file under src/: whole words only (a longer name that "
        f"contains {old}, like {old}_count or my{old}, stays as it is); other files stay as they are.",
        files,
        (
            Check(
                "src/ after the rename",
                "result = {p: read('src/' + p) for p in listdir('src')}",
                {**{p[4:]: t for p, t in after.items()}, "NOTES.txt": files["src/NOTES.txt"]},
            ),
        ),
        f"sed -i -E 's/\\b{old}\\b/{new}/g' src/*.py",
        answer=after,
    )


def _swap_word(text: str, old: str, new: str) -> str:
    return re.sub(rf"\b{old}\b", new, text)


# -- archives --------------------------------------------------------------------------------------


def _backup_exclude(rng: random.Random) -> Task:
    files, kept = {}, []
    subs = ["", *(f"{w}/" for w in _words(rng, 2))]
    for name in _words(rng, rng.randint(5, 10)):
        sub = rng.choice(subs)
        kind = rng.choice(["src", "src", "log", "tmp"])
        if kind == "log":
            path = f"project/{sub}{name}.log"
        elif kind == "tmp":
            path = f"project/{sub}tmp/{name}.txt"
        else:
            path = f"project/{sub}{name}.{rng.choice(['py', 'md', 'cfg'])}"
        files[path] = f"{name}\n"
        if kind == "src":
            kept.append(path)
    if not kept:
        kept.append(f"project/{_word(rng)}x.py")
        files[kept[-1]] = "x\n"
    return Task(
        "backup_exclude",
        "Create backup.tar.gz, a gzip-compressed tar archive of the directory project/ (its member names starting "
        "with project/), without the .log files and without any directory named tmp (nor what it holds).",
        files,
        (
            Check(
                "backup.tar.gz's files",
                "result = sh(\"tar -tzf backup.tar.gz | grep -v '/$' | LC_ALL=C sort\")",
                [0, _lines(sorted(kept))],
            ),
            # the members' contents too: names alone would pay an archive of empty files
            Check(
                "backup.tar.gz's contents",
                "result = sh('mkdir -p /tmp/b && tar -xzf backup.tar.gz -C /tmp/b && cd /tmp/b && "
                "find . -type f -exec sha256sum {} + | LC_ALL=C sort -k2')",
                [0, _lines(f"{hashlib.sha256(files[p].encode()).hexdigest()}  ./{p}" for p in sorted(kept))],
            ),
        ),
        "tar --exclude='*.log' --exclude='tmp' -czf backup.tar.gz project",
        answer={"backup.tar.gz": _tar_gz({p: files[p] for p in kept})},
    )


def _nested_archive(rng: random.Random) -> Task:
    names = _words(rng, rng.randint(3, 6))
    target = rng.choice(names)
    inner = {f"data/{n}.txt": f"{_word(rng, 4)} {rng.randint(0, 10**6)}\n" for n in names}
    outer = {"inner/README": "the payload is inside\n"}
    payload = _tar_gz(inner)
    # the outer archive holds the inner one as a member (bytes): built by hand
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.USTAR_FORMAT) as t:
        for name, data in sorted(
            {**{k: v.encode() for k, v in outer.items()}, "inner/payload.tar.gz": payload}.items()
        ):
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            t.addfile(info, io.BytesIO(data))
    bundle = gzip.compress(raw.getvalue(), mtime=0)
    return Task(
        "nested_archive",
        f"bundle.tar.gz holds another archive, and that one a file named {target}.txt. Copy that file's contents "
        "to found.txt in the workspace.",
        {"bundle.tar.gz": bundle},
        (Check("found.txt", "result = read('found.txt')", inner[f"data/{target}.txt"]),),
        "mkdir -p /tmp/x && tar -xzf bundle.tar.gz -C /tmp/x && tar -xzf /tmp/x/inner/payload.tar.gz -C /tmp/x && "
        f"cp /tmp/x/data/{target}.txt found.txt",
        answer={"found.txt": inner[f"data/{target}.txt"]},
    )


def _checksums(rng: random.Random) -> Task:
    files, sums, bad = {}, [], []
    for name in _words(rng, rng.randint(5, 10)):
        text = f"{_word(rng, 4)} {rng.randint(0, 10**6)}\n"
        path = f"files/{name}.dat"
        sums.append(f"{hashlib.sha256(text.encode()).hexdigest()}  {path}")
        if rng.random() < 0.3:
            text = text.replace(text[0], text[0].upper(), 1)  # one byte changed
            bad.append(path)
        files[path] = text
    if not bad:
        path = next(iter(files))
        files[path] = files[path].upper()
        bad.append(path)
    files["SHA256SUMS"] = _lines(sums)
    return Task(
        "checksums",
        "SHA256SUMS lists the SHA-256 sums the files under files/ should have (as sha256sum prints them). Write "
        "bad.txt: the paths (as SHA256SUMS names them) of the files whose contents do not match, sorted.",
        files,
        (Check("bad.txt", "result = read('bad.txt')", _lines(sorted(bad))),),
        "sha256sum -c SHA256SUMS 2>/dev/null | grep -v ': OK$' | sed 's/: FAILED$//' | LC_ALL=C sort > bad.txt",
        answer={"bad.txt": _lines(sorted(bad))},
    )


def _sqlite_report(rng: random.Random) -> Task:
    cities = [w.capitalize() for w in _words(rng, 3)]
    city = cities[0]
    names = _words(rng, rng.randint(5, 9), 3)
    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT, city TEXT)")
    db.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER, cents INTEGER)")
    totals: dict[str, int] = {}
    for i, name in enumerate(names, start=1):
        c = city if i <= 3 else rng.choice(cities)
        db.execute("INSERT INTO customers VALUES (?, ?, ?)", (i, name, c))
    used = set()
    for oid in range(1, rng.randint(10, 30)):
        cid = rng.randint(1, len(names))
        cents = rng.randint(100, 50000)
        db.execute("INSERT INTO orders VALUES (?, ?, ?)", (oid, cid, cents))
        used.add(cid)
    db.commit()
    for name, total in db.execute(
        "SELECT c.name, SUM(o.cents) FROM customers c JOIN orders o ON o.customer_id = c.id "
        "WHERE c.city = ? GROUP BY c.id",
        (city,),
    ):
        totals[name] = total
    if not totals:
        db.execute("INSERT INTO orders VALUES (?, ?, ?)", (999, 1, 4242))
        db.commit()
        totals[names[0]] = 4242
    data = db.serialize()
    db.close()
    rows = sorted(totals.items(), key=lambda r: (-r[1], r[0]))
    expected = _lines(f"{n} {_cents(c)}" for n, c in rows)
    query = (
        "SELECT c.name, SUM(o.cents) FROM customers c JOIN orders o ON o.customer_id = c.id "
        "WHERE c.city = ? GROUP BY c.id ORDER BY SUM(o.cents) DESC, c.name"
    )
    return Task(
        "sqlite_report",
        f"shop.db is a SQLite database with the tables customers (id, name, city) and orders (id, customer_id, "
        f"cents). Write report.txt: for every customer in {city} with at least one order, a line `NAME TOTAL` "
        "with the sum of their orders in currency units with two decimals (cents / 100), largest total first "
        "(ties by name). Python's sqlite3 module is available.",
        {"shop.db": bytes(data)},
        (Check("report.txt", "result = read('report.txt')", expected),),
        "python3 -c 'import sqlite3\n"
        'db = sqlite3.connect("shop.db")\n'
        f'for n, c in db.execute("{query}", ("{city}",)): print(n, "%d.%02d" % (c // 100, c % 100))\' > report.txt',
        answer={"report.txt": expected},
    )


# -- data formats ----------------------------------------------------------------------------------


def _csv_to_json(rng: random.Random) -> Task:
    cities = [w.capitalize() for w in _words(rng, 3)]
    people = [
        {"name": w.capitalize(), "age": rng.randint(18, 90), "city": rng.choice(cities)}
        for w in _words(rng, rng.randint(3, 8))
    ]
    return Task(
        "csv_to_json",
        "people.csv has the header name,age,city. Write people.json: a JSON array with one object per row, in "
        "the file's order, with the keys name, age (a number) and city.",
        {"people.csv": "name,age,city\n" + _lines(f"{p['name']},{p['age']},{p['city']}" for p in people)},
        (Check("people.json", "import json\nresult = json.loads(read('people.json'))", people),),
        "python3 -c 'import csv, json\n"
        'rows = [dict(r, age=int(r["age"])) for r in csv.DictReader(open("people.csv"))]\n'
        'json.dump(rows, open("people.json", "w"), indent=2)\'',
        answer={"people.json": json.dumps(people, indent=2)},
    )


def _fix_json_config(rng: random.Random) -> Task:
    keys = _words(rng, rng.randint(3, 6))
    values: dict[str, object] = {}
    for k in keys:
        values[k] = rng.choice([rng.randint(0, 999), _word(rng, 3), rng.random() < 0.5])
    port = rng.randint(1024, 65535)
    old_port = rng.randint(1024, 65535)
    broken = ["{", "  // edited by hand", f"  'port': {old_port},"]
    for i, (k, v) in enumerate(values.items()):
        comma = "," if i < len(values) - 1 or rng.random() < 0.7 else ""  # a trailing comma, often
        broken.append(f'  "{k}": {json.dumps(v)}{comma}')
    broken.append("}")
    expected = {"port": port, **values}
    return Task(
        "fix_json_config",
        f"config.json is not valid JSON (a comment, single quotes, a trailing comma, perhaps). Fix it so that it "
        f"parses as JSON with the same keys and values, except that port is now {port} (a number).",
        {"config.json": _lines(broken)},
        (Check("config.json parses", "import json\nresult = json.loads(read('config.json'))", expected),),
        "sed -e '/^ *\\/\\//d' -e \"s/'/\\\"/g\" config.json > /tmp/c && python3 -c 'import json, re\n"
        't = re.sub(r",\\s*}", "}", open("/tmp/c").read())\n'
        f'd = json.loads(t); d["port"] = {port}\n'
        'json.dump(d, open("config.json", "w"), indent=2)\'',
        answer={"config.json": json.dumps(expected, indent=2)},
    )


def _split_csv(rng: random.Random) -> Task:
    size = rng.randint(3, 7)
    header = ",".join(_words(rng, 3))
    rows = [f"{_word(rng)},{rng.randint(0, 999)},{rng.randint(0, 9)}" for _ in range(rng.randint(size + 1, size * 5))]
    parts = {
        f"parts/part_{i // size + 1:02d}.csv": header + "\n" + _lines(rows[i : i + size])
        for i in range(0, len(rows), size)
    }
    return Task(
        "split_csv",
        f"Split data.csv (a header line, then rows) into files of {size} rows each, in order, named "
        "parts/part_01.csv, parts/part_02.csv, ... (the last may hold fewer); each starts with the header line.",
        {"data.csv": header + "\n" + _lines(rows)},
        (
            Check(
                "parts/",
                "result = {p: read('parts/' + p) for p in listdir('parts')}",
                {p[6:]: t for p, t in parts.items()},
            ),
        ),
        f"mkdir -p parts && tail -n +2 data.csv | split -l {size} -d -a 2 --numeric-suffixes=1 - parts/part_ && "
        'for f in parts/part_??; do { head -1 data.csv; cat "$f"; } > "$f.csv" && rm "$f"; done',
        answer=parts,
    )


# -- scripts, services, processes ------------------------------------------------------------------


def _fix_sum_script(rng: random.Random) -> Task:
    columns = _words(rng, rng.randint(3, 6))
    col = rng.randrange(1, len(columns))
    label = _word(rng, 3)

    def csv(r: random.Random) -> tuple[str, int]:
        rows = [[str(r.randint(0, 999)) for _ in columns] for _ in range(r.randint(2, 12))]
        return ",".join(columns) + "\n" + _lines(",".join(x) for x in rows), sum(int(x[col]) for x in rows)

    head = f"#!/bin/bash\n# prints {label}=<the sum of the {columns[col]} column>\n"
    script = head + f"awk -F, '{{s += $1}} END {{print \"{label}=\" s}}'\n"
    fixed = head + f"awk -F, 'NR > 1 {{s += ${col + 1}}} END {{print \"{label}=\" s + 0}}'\n"
    cases = [csv(rng) for _ in range(3)]
    sample, _ = csv(rng)
    return Task(
        "fix_sum_script",
        f"sum.sh reads a CSV file (with a header line) on its standard input and should print one line "
        f"`{label}=N`, where N is the sum of the column named {columns[col]}. It prints the wrong number: fix it "
        "(it is run as ./sum.sh < file.csv, on files with the same header as sample.csv).",
        {"sum.sh": script, "sample.csv": sample},
        tuple(
            Check(
                f"./sum.sh on hidden case {i + 1}",
                f"result = sh('./sum.sh', stdin={text!r})",
                [0, f"{label}={total}\n"],
            )
            for i, (text, total) in enumerate(cases)
        ),
        f"cat > sum.sh <<'EOF'\n{fixed}EOF\nchmod +x sum.sh",
        modes={"sum.sh": 0o755},
        answer={"sum.sh": fixed},
        answer_modes={"sum.sh": 0o755},
    )


def _service_script(rng: random.Random) -> Task:
    name = _word(rng)
    ctl = f"{_word(rng)}ctl.sh"
    pidfile = f"{rng.choice(['run', 'var/run', 'pids'])}/{name}.pid"
    worker = f"#!/bin/bash\n# the {name} service: runs until it is stopped\nwhile :; do sleep 1; done\n"
    # The worker must really run and really end: the process the pid file names runs
    # {name}.sh, and after stop no process runs it (polled for up to 3 s: a signal is not
    # instant). The pattern {name}[.]sh matches no command line of the check's own (theirs
    # hold the brackets), so a script that records a state and writes a pid of another
    # process (its parent's) fails.
    running = (
        f"workers() {{ n=0; for p in /proc/[0-9]*; do grep -qs '{name}[.]sh' $p/cmdline && n=$((n+1)); done; "
        "echo $n; }; "
    )
    sequence = (
        running + f"./{ctl} status; ./{ctl} start; echo start=$?; ./{ctl} status; ./{ctl} start; echo again=$?; "
        f'kill -0 "$(cat {pidfile})" && echo alive; grep -qs \'{name}[.]sh\' "/proc/$(cat {pidfile})/cmdline" '
        f"&& echo worker; echo workers=$(workers); ./{ctl} stop; echo stop=$?; ./{ctl} status; "
        f"test -e {pidfile} || echo no-pidfile; "
        'for i in $(seq 30); do [ "$(workers)" = 0 ] && break; sleep 0.1; done; echo after=$(workers)'
    )
    expected = (
        f"{name}: stopped\nstart=0\n{name}: running\n{name}: already running\nagain=1\nalive\nworker\n"
        f"workers=1\nstop=0\n{name}: stopped\nno-pidfile\nafter=0\n"
    )
    body = (
        f'#!/bin/bash\ncd "$(dirname "$0")"\nPID={pidfile}\n'
        'alive() { [ -f "$PID" ] && kill -0 "$(cat "$PID")" 2>/dev/null; }\n'
        'case "$1" in\n'
        f"  start) if alive; then echo '{name}: already running'; exit 1; fi\n"
        f'    mkdir -p "$(dirname "$PID")"; nohup ./{name}.sh >/dev/null 2>&1 & echo $! > "$PID";;\n'
        '  stop) if alive; then kill "$(cat "$PID")"; fi; rm -f "$PID";;\n'
        f"  status) if alive; then echo '{name}: running'; else echo '{name}: stopped'; fi;;\n"
        '  *) echo "usage: $0 start|stop|status" >&2; exit 2;;\nesac\n'
    )
    return Task(
        "service_script",
        f"{name}.sh is a long-running service. Write an executable control script {ctl} taking one argument: "
        f"`start` starts ./{name}.sh in the background (its output discarded) and writes its process id to "
        f"{pidfile} (creating the directory), or prints `{name}: already running` and exits 1 when it runs "
        f"already; `status` prints `{name}: running` when the process named by {pidfile} is alive, else "
        f"`{name}: stopped`; `stop` ends "
        f"the process and removes {pidfile}. start, stop and status otherwise exit 0 and print nothing else. "
        f"It is run from the workspace as ./{ctl}.",
        {f"{name}.sh": worker},
        (Check(f"{ctl} start/status/stop", f"result = sh({sequence!r}, timeout=20)", [0, expected]),),
        f"cat > {ctl} <<'EOF'\n{body}EOF\nchmod +x {ctl}",
        modes={f"{name}.sh": 0o755},
        answer={ctl: body},
        answer_modes={ctl: 0o755},
    )


def _job_timeouts(rng: random.Random) -> Task:
    files, results = {}, []
    names = sorted(_words(rng, rng.randint(3, 6)))
    hangs = set(rng.sample(names, rng.randint(1, 2)))
    for name in names:
        if name in hangs:
            files[f"jobs/{name}.sh"] = f"#!/bin/bash\necho {name} working\nsleep 300\n"
            results.append(f"{name} timeout")
        else:
            code = rng.choice([0, 0, 1, 2, 3, 7, 42])
            files[f"jobs/{name}.sh"] = f"#!/bin/bash\necho {name} done\nexit {code}\n"
            results.append(f"{name} {code}")
    return Task(
        "job_timeouts",
        "Run each script jobs/NAME.sh (with bash) with a time limit of 1 second, and write results.txt: a line "
        "`NAME STATUS` per job in order of name, STATUS being its exit status, or `timeout` when the limit ended it.",
        files,
        (Check("results.txt", "result = read('results.txt')", _lines(results)),),
        'for f in jobs/*.sh; do n=$(basename "$f" .sh); timeout 1 bash "$f" >/dev/null 2>&1; rc=$?; '
        '[ $rc = 124 ] && rc=timeout; echo "$n $rc"; done > results.txt',
        answer={"results.txt": _lines(results)},
    )


# -- git -------------------------------------------------------------------------------------------


def _history(rng: random.Random, n: int, path: str) -> tuple[list[tuple[str, dict[str, str | None]]], list[str]]:
    """``n`` commits that each change ``path`` (key = value lines) and sometimes NOTES; their
    messages are distinct; returns the commits and each commit's version of ``path``."""
    keys = _words(rng, 4)
    values = {k: rng.randint(0, 99) for k in keys}
    commits, versions = [], []
    messages: list[str] = []
    while len(messages) < n:
        m = f"{rng.choice(['Tune', 'Set', 'Change', 'Bump', 'Adjust'])} {_word(rng, 3)}"
        if m not in messages:
            messages.append(m)
    for i in range(n):
        values[rng.choice(keys)] = rng.randint(100, 9999)
        text = _lines(f"{k} = {v}" for k, v in values.items())
        changes: dict[str, str | None] = {path: text}
        if rng.random() < 0.4:
            changes["NOTES"] = f"note {i} {_word(rng)}\n"
        commits.append((messages[i], changes))
        versions.append(text)
    return commits, versions


def _git_commit(rng: random.Random) -> Task:
    commits, _ = _history(rng, rng.randint(2, 5), "settings.conf")
    commits.insert(0, ("Initial import", {"VERSION": f"0.{rng.randint(1, 9)}.0\n"}))
    files, ids = git_repo(commits)
    version = f"{rng.randint(1, 9)}.{rng.randint(0, 20)}.{rng.randint(0, 20)}"
    message = f"Release {version}"
    return Task(
        "git_commit",
        f"The workspace is a git repository on branch main. Set the file VERSION to the single line {version} and "
        f"commit that change (VERSION only) on main with the message `{message}`, leaving nothing uncommitted.",
        files,
        (
            Check(
                "the new commit",
                "result = [sh('git log -1 --format=%s%n%P'), sh('git show HEAD:VERSION'), "
                "sh('git status --porcelain'), sh('git diff --name-only HEAD~1 HEAD')]",
                [[0, f"{message}\n{ids[-1]}\n"], [0, f"{version}\n"], [0, ""], [0, "VERSION\n"]],
            ),
        ),
        f"echo {version} > VERSION && git add VERSION && git commit -q -m '{message}'",
        answer={"VERSION": f"{version}\n"},
    )


def _git_find_commit(rng: random.Random) -> Task:
    commits, _ = _history(rng, rng.randint(5, 12), "app.conf")
    token = f"feature_{_word(rng, 3)}"
    at = rng.randrange(1, len(commits))
    for _message, changes in commits[at:]:
        changes["app.conf"] = (changes["app.conf"] or "") + f"{token} = on\n"
    files, ids = git_repo(commits)
    return Task(
        "git_find_commit",
        f"The workspace is a git repository. Find the commit that first added the setting {token} to app.conf "
        "and write its full commit id (40 hexadecimal digits) alone to culprit.txt.",
        files,
        (Check("culprit.txt", "result = read('culprit.txt').strip()", ids[at]),),
        f"git log -S {token} --format=%H -- app.conf | tail -1 > culprit.txt",
        answer={"culprit.txt": ids[at] + "\n"},
    )


def _git_branch(rng: random.Random) -> Task:
    commits, _ = _history(rng, rng.randint(4, 9), "tuning.conf")
    files, ids = git_repo(commits)
    at = rng.randrange(0, len(commits) - 1)
    message = commits[at][0]
    branch = f"fix-{_word(rng, 3)}"
    return Task(
        "git_branch",
        f"The workspace is a git repository on branch main. Create a branch named {branch} that points at the "
        f"commit whose message is `{message}`, and stay on main.",
        files,
        (
            Check(
                f"{branch} and HEAD",
                f"result = [sh('git rev-parse --verify -q refs/heads/{branch}'), sh('git symbolic-ref HEAD'), "
                "sh('git rev-parse HEAD')]",
                [[0, ids[at] + "\n"], [0, "refs/heads/main\n"], [0, ids[-1] + "\n"]],
            ),
        ),
        f"git branch {branch} \"$(git log --format=%H --grep='^{message}$')\"",
        answer={f".git/refs/heads/{branch}": ids[at] + "\n"},
    )


def _git_restore(rng: random.Random) -> Task:
    commits, versions = _history(rng, rng.randint(4, 9), "limits.conf")
    files, ids = git_repo(commits)
    at = rng.choice([i for i, v in enumerate(versions) if v != versions[-1]])
    message = commits[at][0]
    return Task(
        "git_restore",
        f"The workspace is a git repository. Put limits.conf in the work tree back to its contents as of the commit "
        f"whose message is `{message}`, without committing and without moving HEAD.",
        files,
        (
            Check(
                "limits.conf and HEAD",
                "result = [read('limits.conf'), sh('git rev-parse HEAD')]",
                [versions[at], [0, ids[-1] + "\n"]],
            ),
        ),
        f"git show \"$(git log --format=%H --grep='^{message}$'):limits.conf\" > limits.conf",
        answer={"limits.conf": versions[at]},
    )


#: The multi-step families; their ids, splits and tiers are stable.
FAMILIES: list[TaskFamily] = [
    TaskFamily("status_report", _status_report, "train", "medium"),
    TaskFamily("top_client", _top_client, "train", "medium"),
    TaskFamily("bytes_per_path", _bytes_per_path, "validation", "hard"),
    TaskFamily("join_totals", _join_totals, "train", "hard"),
    TaskFamily("jsonl_filter", _jsonl_filter, "test", "medium"),
    TaskFamily("region_totals", _region_totals, "train", "easy"),
    TaskFamily("first_seen", _first_seen, "train", "easy"),
    TaskFamily("env_merge", _env_merge, "train", "hard"),
    TaskFamily("histogram", _histogram, "validation", "medium"),
    TaskFamily("common_lines", _common_lines, "train", "easy"),
    TaskFamily("date_format", _date_format, "train", "medium"),
    TaskFamily("word_counts", _word_counts, "test", "easy"),
    TaskFamily("html_links", _html_links, "train", "medium"),
    TaskFamily("group_members", _group_members, "test", "hard"),
    TaskFamily("disk_usage", _disk_usage, "train", "medium"),
    TaskFamily("block_extract", _block_extract, "validation", "medium"),
    TaskFamily("rename_ext", _rename_ext, "train", "medium"),
    TaskFamily("sort_into_dirs", _sort_into_dirs, "train", "medium"),
    TaskFamily("duplicate_files", _duplicate_files, "test", "hard"),
    TaskFamily("fix_permissions", _fix_permissions, "train", "medium"),
    TaskFamily("manifest_tree", _manifest_tree, "validation", "medium"),
    TaskFamily("compress_logs", _compress_logs, "train", "hard"),
    TaskFamily("rename_identifier", _rename_identifier, "train", "medium"),
    TaskFamily("backup_exclude", _backup_exclude, "train", "medium"),
    TaskFamily("nested_archive", _nested_archive, "test", "medium"),
    TaskFamily("checksums", _checksums, "train", "medium"),
    TaskFamily("sqlite_report", _sqlite_report, "validation", "hard"),
    TaskFamily("csv_to_json", _csv_to_json, "train", "medium"),
    TaskFamily("fix_json_config", _fix_json_config, "train", "hard"),
    TaskFamily("split_csv", _split_csv, "test", "medium"),
    TaskFamily("fix_sum_script", _fix_sum_script, "train", "medium"),
    TaskFamily("service_script", _service_script, "train", "hard"),
    TaskFamily("job_timeouts", _job_timeouts, "validation", "hard"),
    TaskFamily("git_commit", _git_commit, "train", "medium"),
    TaskFamily("git_find_commit", _git_find_commit, "test", "hard"),
    TaskFamily("git_branch", _git_branch, "train", "medium"),
    TaskFamily("git_restore", _git_restore, "train", "hard"),
]

#: Every task family, in a stable order: the first 12, then the multi-step ones above, each
#: with the split it declares (``train``, ``validation`` or ``test``). An id keeps its split and
#: tier for ever: no family moves between splits, so evaluations on ``test`` stay comparable.
TASKS = TaskSet([*FIRST_FAMILIES, *FAMILIES])

"""URL slugs."""


def slugify(title):
    """'Hello, World' -> 'hello-world'."""
    out = []
    for ch in title.lower():
        if ch.isascii() and ch.isalnum():
            out.append(ch)
        elif out and out[-1] != "-":
            out.append("-")
    return "".join(out).strip("-")
